//! The bootstrap token: `<hex sha256(CA DER)>.<HS256 JWT {exp[, gen]}>`, keyed by the CA key
//! DER. The optional `gen` claim is the token generation the token was issued under: bumping
//! the generation (cloudhub keeps it beside the token) invalidates every token issued before,
//! which the signature alone cannot do until they expire. A token without the claim (as
//! KubeEdge's cloudcore issues them) belongs to the empty generation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha384, Sha512};

use crate::ca::CertificateAuthority;
use crate::error::{Error, Result};

/// Go's golang-jwt header for HS256, keys sorted as Go marshals a map.
const HS256_HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A keyed HMAC of `signing_input` for the JWT algorithm `alg`; refused unless it is HMAC.
fn keyed(alg: &str, secret: &[u8], signing_input: &[u8]) -> Result<Keyed> {
    fn run<M: Mac + hmac::digest::KeyInit>(secret: &[u8], input: &[u8]) -> M {
        let mut m = <M as hmac::digest::KeyInit>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(input);
        m
    }
    match alg {
        "HS256" => Ok(Keyed::Hs256(run(secret, signing_input))),
        "HS384" => Ok(Keyed::Hs384(run(secret, signing_input))),
        "HS512" => Ok(Keyed::Hs512(run(secret, signing_input))),
        other => Err(Error::Token(format!(
            "signing method {other:?} is not HMAC"
        ))),
    }
}

/// One of the HMACs a JWT may name, already fed its signing input.
enum Keyed {
    Hs256(Hmac<Sha256>),
    Hs384(Hmac<Sha384>),
    Hs512(Hmac<Sha512>),
}

impl Keyed {
    /// The tag.
    fn tag(self) -> Vec<u8> {
        match self {
            Keyed::Hs256(m) => m.finalize().into_bytes().to_vec(),
            Keyed::Hs384(m) => m.finalize().into_bytes().to_vec(),
            Keyed::Hs512(m) => m.finalize().into_bytes().to_vec(),
        }
    }

    /// Whether `given` is the tag, compared in constant time (`Mac::verify_slice`).
    fn verifies(self, given: &[u8]) -> bool {
        match self {
            Keyed::Hs256(m) => m.verify_slice(given).is_ok(),
            Keyed::Hs384(m) => m.verify_slice(given).is_ok(),
            Keyed::Hs512(m) => m.verify_slice(given).is_ok(),
        }
    }
}

/// An HS256 JWT whose only claim is `exp` = now + `lifetime` (seconds), signed with `secret`.
pub fn create_jwt(secret: &[u8], lifetime: Duration) -> String {
    create_jwt_expiring(secret, now_secs() + lifetime.as_secs() as i64)
}

/// An HS256 JWT with the given `exp` (Unix seconds); for tests of expired tokens.
pub fn create_jwt_expiring(secret: &[u8], exp: i64) -> String {
    jwt(secret, exp, "")
}

/// The JWT: claims `exp`, plus `gen` when `generation` is not empty.
fn jwt(secret: &[u8], exp: i64, generation: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(HS256_HEADER);
    let claims = match generation {
        "" => serde_json::json!({ "exp": exp }),
        g => serde_json::json!({ "exp": exp, "gen": g }),
    };
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let input = format!("{header}.{claims}");
    let sig = keyed("HS256", secret, input.as_bytes())
        .map(Keyed::tag)
        .unwrap_or_default();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// Checks a JWT as the certificate server does: three parts, an HMAC algorithm (HS256, HS384
/// or HS512, as upstream accepts any HS*), a signature made with `secret`, and an `exp` claim
/// in the future. Returns `exp`. Rust: a token without `exp` is refused (upstream accepts it
/// as never expiring; cloudcore never issues one).
pub fn verify_jwt(jwt: &str, secret: &[u8]) -> Result<i64> {
    let mut parts = jwt.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Error::Token("a JWT has three dot-separated parts".into()));
    };
    let decode = |part: &str, what: &str| {
        URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .map_err(|_| Error::Token(format!("{what} is not base64url")))
    };
    let header: serde_json::Value = serde_json::from_slice(&decode(h, "header")?)
        .map_err(|_| Error::Token("header is not JSON".into()))?;
    let alg = header
        .get("alg")
        .and_then(|a| a.as_str())
        .ok_or_else(|| Error::Token("header has no alg".into()))?;
    let expected = keyed(alg, secret, format!("{h}.{c}").as_bytes())?;
    let given = decode(s, "signature")?;
    if !expected.verifies(&given) {
        return Err(Error::Token("signature is invalid".into()));
    }
    let claims: serde_json::Value = serde_json::from_slice(&decode(c, "claims")?)
        .map_err(|_| Error::Token("claims are not JSON".into()))?;
    let exp = claims
        .get("exp")
        .and_then(|e| e.as_f64())
        .ok_or_else(|| Error::Token("token has no exp claim".into()))? as i64;
    if exp <= now_secs() {
        return Err(Error::Token("token is expired".into()));
    }
    Ok(exp)
}

/// The `gen` claim of a JWT (empty when absent or unreadable). Read it only from a JWT that
/// [`verify_jwt`] accepted: the claim is not authenticated by itself.
pub fn jwt_generation(jwt: &str) -> String {
    jwt.split('.')
        .nth(1)
        .and_then(|c| URL_SAFE_NO_PAD.decode(c.trim_end_matches('=')).ok())
        .and_then(|c| serde_json::from_slice::<serde_json::Value>(&c).ok())
        .and_then(|c| c.get("gen")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Lowercase hex SHA-256 of `bytes` (the edge checks the downloaded CA with it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(Sha256::digest(bytes))
}

/// A full bootstrap token for `ca`: `<hex sha256 of the CA DER>.<JWT>`, 4 dot-separated parts.
pub fn create_token(ca: &CertificateAuthority, lifetime: Duration) -> String {
    create_token_of_generation(ca, lifetime, "")
}

/// [`create_token`] for token generation `generation` (its `gen` claim; none when empty).
pub fn create_token_of_generation(
    ca: &CertificateAuthority,
    lifetime: Duration,
    generation: &str,
) -> String {
    format!(
        "{}.{}",
        ca.cert_sha256_hex(),
        jwt(
            ca.key_der(),
            now_secs() + lifetime.as_secs() as i64,
            generation
        )
    )
}

/// Splits a bootstrap token into (CA hash, JWT). `None` unless it has 4 dot-separated parts.
pub fn split_token(token: &str) -> Option<(&str, &str)> {
    let token = token.trim();
    let (hash, jwt) = token.split_once('.')?;
    (jwt.split('.').count() == 3 && !hash.is_empty()).then_some((hash, jwt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwt_round_trip_and_refusals() {
        let secret = b"ca key der";
        let jwt = create_jwt(secret, Duration::from_secs(60));
        let exp = verify_jwt(&jwt, secret).unwrap();
        assert!((exp - now_secs() - 60).abs() <= 1);
        assert!(verify_jwt(&jwt, b"other key").is_err());
        assert!(verify_jwt(&create_jwt_expiring(secret, now_secs() - 1), secret).is_err());
        assert!(verify_jwt("a.b", secret).is_err());
        assert!(verify_jwt("", secret).is_err());
        assert!(verify_jwt("!!.!!.!!", secret).is_err());
        // alg none is not HMAC.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(r#"{"exp":99999999999}"#)
        );
        assert!(verify_jwt(&none, secret).is_err());
    }

    #[test]
    fn the_generation_claim_is_carried_only_when_set() {
        let ca = CertificateAuthority::generate().unwrap();
        let plain = create_token(&ca, Duration::from_secs(60));
        let (_, jwt) = split_token(&plain).unwrap();
        assert_eq!(jwt_generation(jwt), "");
        let claims = URL_SAFE_NO_PAD
            .decode(jwt.split('.').nth(1).unwrap())
            .unwrap();
        assert!(
            !String::from_utf8(claims).unwrap().contains("gen"),
            "Go-compatible"
        );
        let bumped = create_token_of_generation(&ca, Duration::from_secs(60), "2");
        let (_, jwt) = split_token(&bumped).unwrap();
        assert!(verify_jwt(jwt, ca.key_der()).is_ok());
        assert_eq!(jwt_generation(jwt), "2");
        assert_eq!(jwt_generation("not a jwt"), "");
    }

    #[test]
    fn jwt_header_is_the_go_one() {
        let jwt = create_jwt(b"k", Duration::from_secs(1));
        let header = jwt.split('.').next().unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(header).unwrap(),
            HS256_HEADER.as_bytes()
        );
    }

    #[test]
    fn tokens_have_four_parts() {
        let ca = CertificateAuthority::generate().unwrap();
        let token = create_token(&ca, Duration::from_secs(3600));
        assert_eq!(token.split('.').count(), 4);
        let (hash, jwt) = split_token(&token).unwrap();
        assert_eq!(hash, ca.cert_sha256_hex());
        assert!(verify_jwt(jwt, ca.key_der()).is_ok());
        assert!(split_token("abc.def").is_none());
    }
}
