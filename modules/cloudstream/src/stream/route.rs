//! The kubelet paths the stream server answers (docs/tunnel-protocol.md); everything else is
//! 404/405 with go-restful's texts.

/// A routed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/containerLogs/{ns}/{pod}/{container}`.
    Logs { namespace: String, pod: String },
    /// `/exec/…` (or `/attach/…` when `attach`), with or without the pod uid segment.
    Exec {
        attach: bool,
        namespace: String,
        pod: String,
    },
    /// `/stats…` and `/metrics…`, resolved by Host or `X-Forwarded-Uri`.
    Metrics,
}

/// Why no route matched: the status and go-restful's body text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRoute {
    NotFound,
    MethodNotAllowed,
}

impl NoRoute {
    pub(crate) fn status(self) -> u16 {
        match self {
            NoRoute::NotFound => 404,
            NoRoute::MethodNotAllowed => 405,
        }
    }

    pub(crate) fn text(self) -> &'static str {
        match self {
            NoRoute::NotFound => "404: Page Not Found",
            NoRoute::MethodNotAllowed => "405: Method Not Allowed",
        }
    }
}

/// Matches a decoded path and method.
pub(crate) fn route(method: &str, path: &str) -> Result<Route, NoRoute> {
    let segs: Vec<&str> = path.strip_prefix('/').unwrap_or("").split('/').collect();
    if segs.iter().skip(1).any(|s| s.is_empty()) && !matches!(segs.as_slice(), ["stats", ""]) {
        return Err(NoRoute::NotFound);
    }
    let (route, methods): (Route, &[&str]) = match segs.as_slice() {
        ["containerLogs", ns, pod, _container] => (
            Route::Logs {
                namespace: (*ns).to_owned(),
                pod: (*pod).to_owned(),
            },
            &["GET"],
        ),
        [verb @ ("exec" | "attach"), ns, pod, _container]
        | [verb @ ("exec" | "attach"), ns, pod, _, _container] => (
            Route::Exec {
                attach: *verb == "attach",
                namespace: (*ns).to_owned(),
                pod: (*pod).to_owned(),
            },
            &["GET", "POST"],
        ),
        ["stats"]
        | ["stats", ""]
        | ["stats", "summary" | "container"]
        | ["stats", _, _]
        | ["stats", _, _, _, _] => (Route::Metrics, &["GET"]),
        ["metrics"] | ["metrics", "cadvisor" | "probes" | "resource"] => (Route::Metrics, &["GET"]),
        _ => return Err(NoRoute::NotFound),
    };
    if methods.contains(&method) {
        Ok(route)
    } else {
        Err(NoRoute::MethodNotAllowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_paths_should_route_and_others_should_not() {
        assert_eq!(
            route("GET", "/containerLogs/ns/p/c"),
            Ok(Route::Logs {
                namespace: "ns".into(),
                pod: "p".into()
            })
        );
        for (m, p) in [("GET", "/exec/ns/p/c"), ("POST", "/exec/ns/p/uid/c")] {
            assert_eq!(
                route(m, p),
                Ok(Route::Exec {
                    attach: false,
                    namespace: "ns".into(),
                    pod: "p".into()
                })
            );
        }
        assert!(matches!(
            route("POST", "/attach/ns/p/uid/c"),
            Ok(Route::Exec { attach: true, .. })
        ));
        for p in [
            "/stats",
            "/stats/summary",
            "/stats/container",
            "/stats/p/c",
            "/stats/ns/p/uid/c",
            "/metrics",
            "/metrics/cadvisor",
            "/metrics/probes",
            "/metrics/resource",
        ] {
            assert_eq!(route("GET", p), Ok(Route::Metrics), "{p}");
        }
        assert_eq!(
            route("POST", "/containerLogs/ns/p/c"),
            Err(NoRoute::MethodNotAllowed)
        );
        assert_eq!(
            route("DELETE", "/exec/ns/p/c"),
            Err(NoRoute::MethodNotAllowed)
        );
        for p in [
            "/portForward/ns/p",
            "/run/ns/p/c",
            "/pods",
            "/healthz",
            "/containerLogs/ns/p",
            "/containerLogs//p/c",
            "/metrics/other",
        ] {
            assert_eq!(route("GET", p), Err(NoRoute::NotFound), "{p}");
        }
    }
}
