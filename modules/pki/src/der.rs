//! Just enough DER to move an EC P-256 key between PKCS#8 and SEC1 (RFC 5208, RFC 5915).

use crate::error::{Error, Result};

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const BIT_STRING: u8 = 0x03;
const CONTEXT_0: u8 = 0xa0;
const CONTEXT_1: u8 = 0xa1;

/// 1.2.840.10045.2.1 (id-ecPublicKey), content bytes.
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// 1.2.840.10045.3.1.7 (prime256v1), content bytes.
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// One tag-length-value read from the front of `input`: (tag, value, rest).
fn read_tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8])> {
    let bad = || Error::Key("truncated or malformed DER".into());
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    let (&first, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad());
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad());
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect(input: &[u8], tag: u8) -> Result<(&[u8], &[u8])> {
    let (t, value, rest) = read_tlv(input)?;
    if t != tag {
        return Err(Error::Key(format!(
            "expected DER tag {tag:#04x}, found {t:#04x}"
        )));
    }
    Ok((value, rest))
}

fn write_tlv(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    out.push(tag);
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value);
}

fn tlv(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 4);
    write_tlv(&mut out, tag, value);
    out
}

/// The parts of an `ECPrivateKey` (RFC 5915): the private scalar and, when present, the
/// public point.
struct EcKey<'a> {
    private: &'a [u8],
    public: Option<&'a [u8]>,
}

fn parse_sec1(der: &[u8]) -> Result<EcKey<'_>> {
    let (body, _) = expect(der, SEQUENCE)?;
    let (version, rest) = expect(body, INTEGER)?;
    if version != [1] {
        return Err(Error::Key("ECPrivateKey version is not 1".into()));
    }
    let (private, mut rest) = expect(rest, OCTET_STRING)?;
    let mut public = None;
    while !rest.is_empty() {
        let (tag, value, next) = read_tlv(rest)?;
        match tag {
            CONTEXT_0 => {
                let (oid, _) = expect(value, OID)?;
                if oid != OID_P256 {
                    return Err(Error::Key("EC key is not on P-256".into()));
                }
            }
            CONTEXT_1 => public = Some(expect(value, BIT_STRING)?.0),
            _ => {}
        }
        rest = next;
    }
    Ok(EcKey { private, public })
}

fn write_sec1(key: &EcKey<'_>) -> Vec<u8> {
    let mut body = tlv(INTEGER, &[1]);
    body.extend(tlv(OCTET_STRING, key.private));
    body.extend(tlv(CONTEXT_0, &tlv(OID, OID_P256)));
    if let Some(public) = key.public {
        body.extend(tlv(CONTEXT_1, &tlv(BIT_STRING, public)));
    }
    tlv(SEQUENCE, &body)
}

/// Re-encodes a P-256 PKCS#8 key as SEC1 `ECPrivateKey` DER with the curve parameters and the
/// public key filled in, the form Go's `x509.MarshalECPrivateKey` writes.
pub(crate) fn pkcs8_to_sec1(pkcs8: &[u8]) -> Result<Vec<u8>> {
    let (body, _) = expect(pkcs8, SEQUENCE)?;
    let (_version, rest) = expect(body, INTEGER)?;
    let (alg, rest) = expect(rest, SEQUENCE)?;
    let (alg_oid, alg_rest) = expect(alg, OID)?;
    if alg_oid != OID_EC_PUBLIC_KEY {
        return Err(Error::Key("PKCS#8 key is not an EC key".into()));
    }
    if let Ok((curve, _)) = expect(alg_rest, OID)
        && curve != OID_P256
    {
        return Err(Error::Key("EC key is not on P-256".into()));
    }
    let (inner, _) = expect(rest, OCTET_STRING)?;
    Ok(write_sec1(&parse_sec1(inner)?))
}

/// Wraps a P-256 SEC1 key into PKCS#8 (what ring and rcgen accept).
pub(crate) fn sec1_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>> {
    let key = parse_sec1(sec1)?;
    if key.public.is_none() {
        // ring needs the public point and we cannot derive it here without more crypto code.
        return Err(Error::Key("SEC1 key has no public key".into()));
    }
    let mut alg = tlv(OID, OID_EC_PUBLIC_KEY);
    alg.extend(tlv(OID, OID_P256));
    let mut body = tlv(INTEGER, &[0]);
    body.extend(tlv(SEQUENCE, &alg));
    body.extend(tlv(OCTET_STRING, &write_sec1(&key)));
    Ok(tlv(SEQUENCE, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkcs8_and_sec1_round_trip() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pkcs8 = key.serialize_der();
        let sec1 = pkcs8_to_sec1(&pkcs8).unwrap();
        let back = sec1_to_pkcs8(&sec1).unwrap();
        let again = rcgen::KeyPair::try_from(back.as_slice()).unwrap();
        assert_eq!(again.public_key_raw(), key.public_key_raw());
        assert_eq!(pkcs8_to_sec1(&back).unwrap(), sec1);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &[][..],
            &[0x30],
            &[0x30, 0x85, 1, 2, 3, 4, 5],
            &[0x30, 0x02, 0x02],
        ] {
            assert!(pkcs8_to_sec1(input).is_err());
            assert!(sec1_to_pkcs8(input).is_err());
        }
    }
}
