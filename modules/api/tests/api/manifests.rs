//! The committed CRD manifests match the Rust types. Regenerate with
//! `UPDATE_MANIFESTS=1 cargo test -p kubeedge-api --test api manifests::`.

use std::path::PathBuf;

use kubeedge_api::crds;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds")
}

#[test]
fn committed_crd_manifests_are_up_to_date() {
    let dir = manifest_dir();
    let update = std::env::var_os("UPDATE_MANIFESTS").is_some();
    if update {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let mut stale = Vec::new();
    for crd in crds::all() {
        let path = dir.join(crds::file_name(&crd));
        let want = crds::to_yaml(&crd).unwrap();
        if update {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            _ => stale.push(path.display().to_string()),
        }
    }
    assert!(
        stale.is_empty(),
        "stale CRD manifests {stale:?}; run UPDATE_MANIFESTS=1 cargo test -p kubeedge-api --test api manifests::"
    );
}

#[test]
fn reliablesync_crds_have_kubeedge_names_and_status_subresources() {
    let all = crds::all();
    let names: Vec<_> = all.iter().filter_map(|c| c.metadata.name.clone()).collect();
    assert!(names.contains(&"objectsyncs.reliablesyncs.kubeedge.io".to_string()));
    assert!(names.contains(&"clusterobjectsyncs.reliablesyncs.kubeedge.io".to_string()));
    for crd in all
        .iter()
        .filter(|c| c.spec.group == "reliablesyncs.kubeedge.io")
    {
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
}
