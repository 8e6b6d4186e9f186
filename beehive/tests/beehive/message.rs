//! The message model against the JSON Go's beehive produces (docs/beehive.md).

use beehive::{Content, Message, constants::operation};

/// A configmap update exactly as Go writes it on the wire (431 bytes).
const GO_CONFIGMAP_UPDATE: &str = r#"{"header":{"msg_id":"8b6e2f4a-91c3-4d7e-b5a2-3c1d0e9f8a76","timestamp":1733140800123,"resourceversion":"90211"},"route":{"source":"edgecontroller","group":"resource","operation":"update","resource":"default/configmap/app-config"},"content":{"metadata":{"name":"app-config","namespace":"default","uid":"4f3c2b1a-0e9d-4c8b-a7f6-5e4d3c2b1a09","resourceVersion":"90211","creationTimestamp":null},"data":{"level":"info","mode":"edge"}}}"#;

/// The edge's ACK of it.
const GO_ACK: &str = r#"{"header":{"msg_id":"e7d6c5b4-a392-4817-9f6e-5d4c3b2a1908","parent_msg_id":"8b6e2f4a-91c3-4d7e-b5a2-3c1d0e9f8a76","timestamp":1733140800187},"route":{"source":"edgecontroller","group":"resource","operation":"response","resource":"default/configmap/app-config"},"content":"OK"}"#;

/// The edge keepalive (196 bytes with the newline Go's encoder adds).
const GO_KEEPALIVE: &str = r#"{"header":{"msg_id":"5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b01","timestamp":1700000000000},"route":{"source":"websocket","group":"resource","operation":"keepalive","resource":"node"},"content":"ping"}"#;

/// Every header and route field set, content keys unsorted, an integer above 2^53 and
/// Go's HTML escapes in strings.
const GO_FULL: &str = r#"{"header":{"msg_id":"a\u003cb","parent_msg_id":"p","timestamp":-5,"resourceversion":"7","sync":true,"type":"channel"},"route":{"source":"s\u0026t","destination":"d","group":"g","operation":"o","resource":"r\u003e"},"content":{"zeta":1,"alpha":9007199254740993,"html":"\u003cb\u003e","nested":{"b":[1,2.5,null],"a":true}}}"#;

#[test]
fn zero_message_encodes_like_go() {
    let json = Message::default().to_json();
    assert_eq!(
        std::str::from_utf8(&json).unwrap(),
        r#"{"header":{"msg_id":"","timestamp":0},"route":{},"content":null}"#
    );
    assert_eq!(json.len(), 64);
}

#[test]
fn go_json_round_trips_byte_identically() {
    for (name, go) in [
        ("configmap update", GO_CONFIGMAP_UPDATE),
        ("ack", GO_ACK),
        ("keepalive", GO_KEEPALIVE),
        ("all fields", GO_FULL),
    ] {
        let msg = Message::from_json(go.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(String::from_utf8(msg.to_json()).unwrap(), go, "{name}");
    }
    assert_eq!(GO_CONFIGMAP_UPDATE.len(), 431);
    assert_eq!(GO_KEEPALIVE.len() + 1, 196);
}

#[test]
fn ids_in_any_form_re_encode_as_they_came() {
    // Lowercase UUIDs are held as 16 bytes, anything else as text: both write back unchanged.
    for (id, parent) in [
        (
            "8B6E2F4A-91C3-4D7E-B5A2-3C1D0E9F8A76",
            "8b6e2f4a-91c3-4d7e-b5a2-3c1d0e9f8a76",
        ),
        (
            "8b6e2f4a91c34d7eb5a23c1d0e9f8a76",
            "{8b6e2f4a-91c3-4d7e-b5a2-3c1d0e9f8a76}",
        ),
        ("edge-7", "8b6e2f4a-91c3-4d7e-b5a2-3c1d0e9F8a76"),
    ] {
        let go = format!(
            r#"{{"header":{{"msg_id":"{id}","parent_msg_id":"{parent}","timestamp":1}},"route":{{}},"content":null}}"#
        );
        let msg = Message::from_json(go.as_bytes()).unwrap();
        assert_eq!(msg.header.id, id);
        assert_eq!(msg.header.parent_id.to_string(), parent);
        assert_eq!(String::from_utf8(msg.to_json()).unwrap(), go);
    }
    let ack = Message::from_json(GO_ACK.as_bytes()).unwrap();
    let update = Message::from_json(GO_CONFIGMAP_UPDATE.as_bytes()).unwrap();
    assert!(ack.header.parent_id.uuid().is_some());
    assert_eq!(
        ack.header.parent_id, update.header.id,
        "answers match their request"
    );
}

#[test]
fn decoded_fields_match_the_go_names() {
    let msg = Message::from_json(GO_FULL.as_bytes()).unwrap();
    assert_eq!(msg.header.id, "a<b");
    assert_eq!(msg.header.parent_id, "p");
    assert_eq!(msg.header.timestamp, -5);
    assert_eq!(msg.header.resource_version, "7");
    assert!(msg.header.sync);
    assert_eq!(msg.header.message_type, "channel");
    assert_eq!(msg.route.source, "s&t");
    assert_eq!(msg.route.destination, "d");
    assert_eq!(msg.route.group, "g");
    assert_eq!(msg.route.operation, "o");
    assert_eq!(msg.route.resource, "r>");
    assert!(msg.content.as_json().contains("9007199254740993"));
}

#[test]
fn unknown_fields_are_accepted_and_keys_match_case_insensitively() {
    let json = r#"{"HEADER":{"MSG_ID":"x","Timestamp":3,"extra":{"deep":[1]}},"Route":{"Source":"edged","bogus":1},"content":null,"more":"ignored"}"#;
    let msg = Message::from_json(json.as_bytes()).unwrap();
    assert_eq!(msg.header.id, "x");
    assert_eq!(msg.header.timestamp, 3);
    assert_eq!(msg.route.source, "edged");
}

#[test]
fn duplicate_keys_take_the_last_value() {
    let json = r#"{"header":{"msg_id":"first","msg_id":"last","timestamp":1},"route":{}}"#;
    assert_eq!(
        Message::from_json(json.as_bytes()).unwrap().header.id,
        "last"
    );
}

#[test]
fn missing_or_null_parts_decode_to_zero_values() {
    let msg = Message::from_json(br#"{"route":null}"#).unwrap();
    assert!(msg.is_empty());
    let msg = Message::from_json(br#"{"header":{"msg_id":null,"timestamp":null}}"#).unwrap();
    assert!(msg.is_empty());
}

#[test]
fn timestamps_must_be_integers_that_fit_i64() {
    for bad in [
        r#"1.7e12"#,
        r#"1700000000000.0"#,
        r#""1700000000000""#,
        r#"9223372036854775808"#,
    ] {
        let json = format!(
            r#"{{"header":{{"msg_id":"x","timestamp":{bad}}},"route":{{}},"content":null}}"#
        );
        let err = Message::from_json(json.as_bytes()).expect_err(bad);
        assert!(err.to_string().contains("invalid"), "{bad}: {err}");
    }
    let ok = r#"{"header":{"msg_id":"x","timestamp":-1700000000000},"route":{},"content":null}"#;
    assert_eq!(
        Message::from_json(ok.as_bytes()).unwrap().header.timestamp,
        -1700000000000
    );
}

#[test]
fn sync_must_be_a_bool_and_route_fields_strings() {
    assert!(Message::from_json(br#"{"header":{"sync":"true"}}"#).is_err());
    assert!(Message::from_json(br#"{"header":{"sync":1}}"#).is_err());
    assert!(Message::from_json(br#"{"route":{"source":5}}"#).is_err());
    assert!(Message::from_json(b"[]").is_err());
    assert!(Message::from_json(b"{").is_err());
}

#[test]
fn a_new_message_has_a_v4_uuid_and_a_millisecond_timestamp() {
    let msg = Message::new();
    assert!(msg.header.id.uuid().is_some(), "kept as 16 bytes");
    let id = &msg.header.id.to_string();
    assert_eq!(id.len(), 36);
    assert_eq!(id, &id.to_lowercase());
    assert_eq!(&id[14..15], "4", "version nibble");
    assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "variant");
    let now = beehive::now_millis();
    assert!((now - msg.header.timestamp).abs() < 1000);
    assert!(msg.header.parent_id.is_empty());
    assert_ne!(Message::new().header.id, msg.header.id);
}

fn request() -> Message {
    let mut m = Message::new()
        .with_route(
            "edgecontroller",
            "resource",
            "node/e1/default/pod/p",
            operation::UPDATE,
        )
        .with_resource_version("42")
        .with_destination("cloudhub")
        .with_content(Content::string("body"));
    m.header.sync = true;
    m.header.message_type = "channel".into();
    m
}

#[test]
fn the_response_constructor_matches_new_resp_by_message() {
    let req = request();
    let resp = req.response(Content::string("OK"));
    assert_ne!(resp.header.id, req.header.id);
    assert_eq!(resp.header.parent_id, req.header.id);
    assert_eq!(
        resp.route.source, "edgecontroller",
        "source is copied, not swapped"
    );
    assert_eq!(resp.route.group, "resource");
    assert_eq!(resp.route.resource, req.route.resource);
    assert_eq!(resp.header.message_type, "channel");
    assert_eq!(resp.route.operation, "response");
    assert!(resp.route.destination.is_empty());
    assert!(resp.header.resource_version.is_empty());
    assert!(!resp.header.sync);
    assert_eq!(resp.content.as_string().as_deref(), Some("OK"));
}

#[test]
fn the_error_constructor_matches_new_error_message() {
    let req = request();
    let err = req.error_response("boom");
    assert_eq!(err.header.parent_id, req.header.id);
    assert_eq!(err.route.operation, "error");
    assert_eq!(err.route.resource, req.route.resource);
    assert!(err.route.source.is_empty() && err.route.group.is_empty());
    let json = String::from_utf8(err.to_json()).unwrap();
    assert!(
        json.contains(
            r#""route":{"operation":"error","resource":"node/e1/default/pod/p"},"content":"boom"}"#
        ),
        "{json}"
    );
}

#[test]
fn clone_keeps_routing_and_content_but_gets_a_new_id() {
    let mut req = request();
    req.header.parent_id = "parent".into();
    let c = req.clone_with_new_id();
    assert_ne!(c.header.id, req.header.id);
    assert_eq!(c.header.parent_id, "parent");
    assert_eq!(c.header.timestamp, req.header.timestamp);
    assert_eq!(
        (c.route.source.as_str(), c.route.group.as_str()),
        ("edgecontroller", "resource")
    );
    assert_eq!(c.route.operation, req.route.operation);
    assert_eq!(c.route.resource, req.route.resource);
    assert_eq!(c.content, req.content);
    assert!(c.route.destination.is_empty() && c.header.resource_version.is_empty());
    assert!(!c.header.sync && c.header.message_type.is_empty());
}

#[test]
fn content_bytes_follow_get_content_data() {
    assert_eq!(&*Content::string("a\"b<").bytes(), b"a\"b<");
    assert_eq!(&*Content::null().bytes(), b"null");
    let obj = Content::json(&serde_json::json!({"k": [1, 2]})).unwrap();
    assert_eq!(&*obj.bytes(), br#"{"k":[1,2]}"#);
    // A string holding JSON text (how the edge sends patches) parses either way.
    let patch = Content::string(r#"{"status":{"phase":"Running"}}"#);
    let v: serde_json::Value = patch.parse_bytes().unwrap();
    assert_eq!(v["status"]["phase"], "Running");
}

#[test]
fn content_is_written_with_go_escaping() {
    let c = Content::string("<a&b>\u{2028}");
    assert_eq!(c.as_json(), r#""\u003ca\u0026b\u003e\u2028""#);
}

#[test]
fn display_is_the_go_log_form() {
    let m = Message::default()
        .with_route("s", "g", "r", "o")
        .with_destination("d");
    assert_eq!(
        m.to_string(),
        "MessageID:  ParentID:  Group: g Source: s Destination: d Resource: r Operation: o"
    );
}

mod roundtrip {
    use beehive::Message;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        // ASCII, the HTML characters Go escapes, U+2028, and other Unicode.
        proptest::string::string_regex("[a-z0-9<>&\"\\\\/ \u{2028}é中-]{0,12}").unwrap()
    }

    fn go_json() -> impl Strategy<Value = String> {
        let header = (text(), text(), any::<i64>(), text(), any::<bool>(), text());
        let route = (text(), text(), text(), text(), text());
        let content = prop_oneof![
            Just("null".to_string()),
            text().prop_map(|s| serde_json::to_string(&s).unwrap()),
            (any::<u64>(), text()).prop_map(|(n, s)| format!(
                r#"{{"zeta":{n},"alpha":{}}}"#,
                serde_json::to_string(&s).unwrap()
            )),
        ];
        (header, route, content).prop_map(
            |((id, parent, ts, rv, sync, ty), (src, dst, grp, op, res), content)| {
                let q = |s: &str| beehive::json::to_string(s).unwrap();
                let mut h = format!(r#""msg_id":{}"#, q(&id));
                if !parent.is_empty() {
                    h += &format!(r#","parent_msg_id":{}"#, q(&parent));
                }
                h += &format!(r#","timestamp":{ts}"#);
                if !rv.is_empty() {
                    h += &format!(r#","resourceversion":{}"#, q(&rv));
                }
                if sync {
                    h += r#","sync":true"#;
                }
                if !ty.is_empty() {
                    h += &format!(r#","type":{}"#, q(&ty));
                }
                let mut r = Vec::new();
                for (k, v) in [
                    ("source", &src),
                    ("destination", &dst),
                    ("group", &grp),
                    ("operation", &op),
                    ("resource", &res),
                ] {
                    if !v.is_empty() {
                        r.push(format!(r#""{k}":{}"#, q(v)));
                    }
                }
                format!(
                    r#"{{"header":{{{h}}},"route":{{{}}},"content":{content}}}"#,
                    r.join(",")
                )
            },
        )
    }

    proptest! {
        #[test]
        fn go_encoded_messages_decode_and_reencode_unchanged(json in go_json()) {
            let msg = Message::from_json(json.as_bytes()).unwrap();
            prop_assert_eq!(String::from_utf8(msg.to_json()).unwrap(), json);
        }
    }
}

/// issue 18: decode errors name the field as Go's `encoding/json` does.
#[test]
fn decode_errors_name_the_field_like_go() {
    for (json, field, path) in [
        (
            r#"{"header":{"msg_id":"x","timestamp":"1700000000000"}}"#,
            "Go struct field MessageHeader.header.timestamp of type int64",
            "header.timestamp",
        ),
        (
            r#"{"header":{"timestamp":1.5}}"#,
            "cannot unmarshal number 1.5 into Go struct field MessageHeader.header.timestamp of type int64",
            "header.timestamp",
        ),
        (
            r#"{"header":{"msg_id":7}}"#,
            "cannot unmarshal number into Go struct field MessageHeader.header.msg_id of type string",
            "header.msg_id",
        ),
        (
            r#"{"header":{"sync":"true"}}"#,
            "cannot unmarshal string into Go struct field MessageHeader.header.sync of type bool",
            "header.sync",
        ),
        (
            r#"{"route":{"source":{"a":1}}}"#,
            "cannot unmarshal object into Go struct field MessageRoute.route.source of type string",
            "route.source",
        ),
        (
            r#"{"header":[1]}"#,
            "cannot unmarshal array into Go struct field Message.header of type model.MessageHeader",
            "header",
        ),
    ] {
        let err = Message::from_json(json.as_bytes()).expect_err(json);
        let text = err.to_string();
        assert!(text.contains(field), "{json}: {text}");
        assert_eq!(err.path(), Some(path), "{json}: {text}");
        // The wire decoders use the Deserialize impl directly: same text.
        let direct = serde_json::from_str::<Message>(json).expect_err(json);
        assert!(direct.to_string().contains(field), "{json}: {direct}");
    }
    let err = Message::from_json(b"[]").unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot unmarshal array into Go value of type model.Message"),
        "{err}"
    );
    // A syntax error inside a field still says where decoding stopped.
    let err = Message::from_json(br#"{"header":{"msg_id":"a","timestamp":-x}}"#).unwrap_err();
    assert_eq!(err.path(), Some("header.timestamp"), "{err}");
    assert!(err.to_string().contains("header.timestamp"), "{err}");
}

fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

/// issue 18: Go's decoder refuses nesting deeper than 10000 (the message object counts as 1),
/// so a message Go peers would refuse is refused where it enters, wherever the nesting is.
#[test]
fn nesting_deeper_than_go_allows_is_refused() {
    let limit = beehive::json::MAX_JSON_DEPTH;
    assert_eq!(limit, 10_000);
    let ok = format!(
        r#"{{"header":{{"msg_id":"x"}},"content":{}}}"#,
        nested(limit - 1)
    );
    let msg = Message::from_json(ok.as_bytes()).unwrap();
    assert_eq!(msg.content.as_json().len(), 2 * (limit - 1));

    for json in [
        format!(
            r#"{{"header":{{"msg_id":"x"}},"content":{}}}"#,
            nested(limit)
        ),
        format!(r#"{{"content":{{"a":{}}}}}"#, nested(limit - 1)),
        format!(r#"{{"unknown":{},"content":null}}"#, nested(limit)),
        format!(r#"{{"header":{{"extra":{}}}}}"#, nested(limit - 1)),
        format!(r#"{{"route":{{"extra":{}}}}}"#, nested(limit - 1)),
    ] {
        let err = Message::from_json(json.as_bytes()).expect_err("too deep");
        assert!(
            err.to_string().contains("maximum depth of 10000"),
            "{}",
            &err.to_string()[..200.min(err.to_string().len())]
        );
        assert!(serde_json::from_str::<Message>(&json).is_err());
    }
    // One level less in an unknown key is fine (Go skips it).
    let json = format!(r#"{{"header":{{"extra":{}}}}}"#, nested(limit - 2));
    assert!(Message::from_json(json.as_bytes()).is_ok());
}

/// issue 18: Go decodes content into `interface{}`, so numbers become float64 and one outside
/// its range fails the whole message; refuse it here rather than pass it on to Go peers.
#[test]
fn content_numbers_outside_float64_are_refused() {
    for content in [
        "1e400",
        "-1e400",
        r#"{"a":[1,2,{"b":1E+309}]}"#,
        &format!("[1{}]", "0".repeat(400)),
    ] {
        let json = format!(r#"{{"header":{{"msg_id":"x"}},"content":{content}}}"#);
        let err = Message::from_json(json.as_bytes()).expect_err(content);
        let text = err.to_string();
        assert!(
            text.contains("into Go struct field Message.content of type float64"),
            "{text}"
        );
        assert_eq!(err.path(), Some("content"), "{text}");
        assert!(serde_json::from_str::<Message>(&json).is_err());
    }
    // Underflow rounds to zero in Go, and big but finite numbers and numbers in strings pass.
    for content in [
        "1e-400",
        "1.7976931348623157e308",
        r#""1e400""#,
        "[9007199254740993]",
    ] {
        let json = format!(r#"{{"content":{content}}}"#);
        let msg = Message::from_json(json.as_bytes()).expect(content);
        assert_eq!(msg.content.as_json(), content);
    }
    // Go skips unknown keys without converting their numbers.
    assert!(Message::from_json(br#"{"extra":1e400,"content":null}"#).is_ok());
}

#[test]
fn new_ids_are_distinct_lowercase_uuid_v4_across_pool_refills() {
    // 256 ids per 4 KiB of OS randomness: cross several refills, on two threads.
    let here: Vec<String> = (0..2000).map(|_| beehive::new_id()).collect();
    let there = std::thread::spawn(|| (0..2000).map(|_| beehive::new_id()).collect::<Vec<_>>())
        .join()
        .unwrap();
    let all: std::collections::HashSet<&String> = here.iter().chain(there.iter()).collect();
    assert_eq!(all.len(), 4000);
    for id in &here {
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4", "version 4: {id}");
        assert!("89ab".contains(&id[19..20]), "RFC 4122 variant: {id}");
        assert_eq!(id, &id.to_lowercase());
    }
}
