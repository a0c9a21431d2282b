//! The local issuer's keys: the RSA key it signs with, its JWK, and the key ring the local
//! authorizer verifies with.
//!
//! The key is kept in the state directory (`.local/<stack>/`[`KEY_FILE`], PKCS#8 DER, owner-only)
//! so tokens survive a restart, and `outbox-local token` (another process) signs with the same
//! file. When that file changes while `up` runs (deleted and created anew by `token`, or replaced
//! by hand), the running runtime picks the new key up: a token whose `kid` the ring does not know
//! makes it read the file again ([`KeyRing::find`]), and so does every JWKS request
//! ([`KeyRing::jwks`]). The new key becomes the one the runtime signs with; the keys it served
//! before stay in its JWKS for the rest of the run, as an identity provider keeps publishing its
//! previous key during a rotation, so tokens signed before still verify until they expire.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize, PublicKeyComponents};
use aws_lc_rs::signature::KeyPair as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde_json::{json, Value};

/// File name of the issuer's private key (PKCS#8 DER) in the runtime's state directory.
pub const KEY_FILE: &str = "issuer-key.der";

/// One RSA key of the issuer: its `kid` (`local-` and the first 16 characters of the modulus,
/// base64url), the keys to sign and verify RS256 with, and its JWK.
pub struct IssuerKey {
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    jwk: Value,
}

impl std::fmt::Debug for IssuerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

impl IssuerKey {
    /// The key of an RSA private key in PKCS#8 DER.
    ///
    /// # Errors
    /// The bytes are not an RSA PKCS#8 key.
    pub fn from_pkcs8(der: &[u8]) -> crate::Result<Self> {
        let pair = KeyPair::from_pkcs8(der).map_err(crate::Error::other("the local issuer's key is not an RSA PKCS#8 key"))?;
        let public = PublicKeyComponents::<Vec<u8>>::from(pair.public_key());
        let (n, e) = (URL_SAFE_NO_PAD.encode(&public.n), URL_SAFE_NO_PAD.encode(&public.e));
        let kid = format!("local-{}", n.chars().take(16).collect::<String>());
        let body = STANDARD.encode(der).as_bytes().chunks(64).map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join("\n");
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n");
        let encoding = EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(crate::Error::other("the local issuer's key"))?;
        let decoding = DecodingKey::from_rsa_components(&n, &e).map_err(crate::Error::other("the local issuer's public key"))?;
        let jwk = json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": n, "e": e});
        Ok(Self { kid, encoding, decoding, jwk })
    }

    /// A new RSA-2048 key, as PKCS#8 DER.
    ///
    /// # Errors
    /// The key generation's error, in words.
    pub fn generate_pkcs8() -> crate::Result<Vec<u8>> {
        let pair = KeyPair::generate(KeySize::Rsa2048).map_err(crate::Error::other("generating the local issuer's RSA key"))?;
        let der = pair.as_der().map_err(crate::Error::other("encoding the local issuer's key"))?;
        Ok(der.as_ref().to_vec())
    }

    /// The key's `kid`.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The key that verifies this key's signatures.
    pub fn decoding(&self) -> &DecodingKey {
        &self.decoding
    }

    /// `claims` signed RS256 with this key, its `kid` in the header.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        // RS256 with an RSA key, claims that are JSON: encoding cannot fail.
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap_or_default()
    }

    /// This key under another `kid` (tests: a forged token naming the issuer's kid).
    #[cfg(test)]
    pub(crate) fn with_kid(mut self, kid: &str) -> Self {
        kid.clone_into(&mut self.kid);
        self
    }
}

/// The issuer's keys: the one it signs with and every one it served in this run, by `kid`;
/// with a key file, re-read when a `kid` is unknown or the JWKS is asked for (module docs).
#[derive(Debug)]
pub struct KeyRing {
    file: Option<PathBuf>,
    state: RwLock<Ring>,
}

#[derive(Debug)]
struct Ring {
    current: Arc<IssuerKey>,
    /// Every key served in this run, `current` included, oldest first.
    served: Vec<Arc<IssuerKey>>,
    /// The key file's bytes when it was last read successfully.
    file_bytes: Option<Vec<u8>>,
}

impl KeyRing {
    /// A ring of one key, without a file: `der` is PKCS#8 DER.
    ///
    /// # Errors
    /// As [`IssuerKey::from_pkcs8`].
    pub fn of_pkcs8(der: &[u8]) -> crate::Result<Self> {
        let key = Arc::new(IssuerKey::from_pkcs8(der)?);
        Ok(Self { file: None, state: RwLock::new(Ring { current: key.clone(), served: vec![key], file_bytes: None }) })
    }

    /// The ring of the key in `dir/`[`KEY_FILE`], the file created (owner-only) with a new key
    /// when absent. Two processes creating it at once agree on one key (the file is created
    /// whole, by a link that fails when it exists, and then read).
    ///
    /// # Errors
    /// The file cannot be read, written or parsed.
    pub fn load_or_create(dir: &Path) -> crate::Result<Self> {
        let path = dir.join(KEY_FILE);
        let der = match std::fs::read(&path) {
            Ok(der) => der,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_key_file(dir, &path)?,
            Err(e) => return Err(crate::Error::io(&path)(e)),
        };
        let key = Arc::new(IssuerKey::from_pkcs8(&der).map_err(crate::Error::other(path.display().to_string()))?);
        Ok(Self { file: Some(path), state: RwLock::new(Ring { current: key.clone(), served: vec![key], file_bytes: Some(der) }) })
    }

    /// The key tokens are signed with: the key file's as last read.
    pub fn current(&self) -> Arc<IssuerKey> {
        self.state.read().unwrap_or_else(PoisonError::into_inner).current.clone()
    }

    /// The served key with `kid`; when there is none, the key file is read again first (a key
    /// rotated since it was last read is found).
    ///
    /// # Errors
    /// The key file changed and cannot be read or parsed (the keys served so far stay).
    pub fn find(&self, kid: &str) -> crate::Result<Option<Arc<IssuerKey>>> {
        if let Some(key) = self.served(kid) {
            return Ok(Some(key));
        }
        self.reload()?;
        Ok(self.served(kid))
    }

    /// The JWKS (`{"keys": [...]}`, every key served in this run, the current one last) after
    /// reading the key file again.
    ///
    /// # Errors
    /// The key file changed and cannot be read or parsed.
    pub fn jwks(&self) -> crate::Result<Value> {
        self.reload()?;
        let ring = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let mut keys: Vec<Value> = ring.served.iter().filter(|k| k.kid != ring.current.kid).map(|k| k.jwk.clone()).collect();
        keys.push(ring.current.jwk.clone());
        Ok(json!({ "keys": keys }))
    }

    fn served(&self, kid: &str) -> Option<Arc<IssuerKey>> {
        self.state.read().unwrap_or_else(PoisonError::into_inner).served.iter().find(|k| k.kid == kid).cloned()
    }

    /// Reads the key file again; a changed key becomes the current one (added to the served
    /// keys when new). A missing file changes nothing (`token` creates it anew).
    fn reload(&self) -> crate::Result<()> {
        let Some(path) = &self.file else { return Ok(()) };
        let der = match std::fs::read(path) {
            Ok(der) => der,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(crate::Error::io(path)(e)),
        };
        if self.state.read().unwrap_or_else(PoisonError::into_inner).file_bytes.as_deref() == Some(der.as_slice()) {
            return Ok(());
        }
        let key = Arc::new(IssuerKey::from_pkcs8(&der).map_err(crate::Error::other(path.display().to_string()))?);
        let mut ring = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let key = match ring.served.iter().find(|k| k.kid == key.kid) {
            Some(known) => known.clone(),
            None => {
                ring.served.push(key.clone());
                key
            }
        };
        tracing::info!(kid = %key.kid, file = %path.display(), "the local issuer's key file changed: signing and verifying with its key");
        ring.current = key;
        ring.file_bytes = Some(der);
        Ok(())
    }
}

/// Creates `path` in `dir` with a new key, readable by its owner only, and returns the key
/// file's bytes: the new key, or the key another process created first.
fn create_key_file(dir: &Path, path: &Path) -> crate::Result<Vec<u8>> {
    let der = IssuerKey::generate_pkcs8()?;
    std::fs::create_dir_all(dir).map_err(crate::Error::io(dir))?;
    let scratch = dir.join(format!("{KEY_FILE}.{}.{}", std::process::id(), uuid::Uuid::new_v4().simple()));
    write_private(&scratch, &der).map_err(crate::Error::io(&scratch))?;
    // A hard link appears whole and fails when the file exists: never a half-written key file,
    // never two processes each believing their own key is the file's.
    let linked = std::fs::hard_link(&scratch, path);
    let _ = std::fs::remove_file(&scratch);
    match linked {
        Ok(()) => Ok(der),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read(path).map_err(crate::Error::io(path)),
        Err(e) => Err(crate::Error::io(path)(e)),
    }
}

/// Writes `bytes` to a new file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir() -> PathBuf {
        std::env::temp_dir().join(format!("outbox-local-keys-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn a_key_written_to_the_file_after_start_is_found_by_its_kid_and_becomes_current() {
        let dir = scratch_dir();
        let ring = KeyRing::load_or_create(&dir).unwrap();
        let first = ring.current();
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join(KEY_FILE)).unwrap().permissions());
        assert_eq!(mode & 0o077, 0, "owner-only");

        // What `outbox-local token` does after the file was deleted: a new key, in a new file.
        std::fs::remove_file(dir.join(KEY_FILE)).unwrap();
        let rotated = KeyRing::load_or_create(&dir).unwrap().current();
        assert_ne!(rotated.kid(), first.kid(), "a new key");
        assert_eq!(ring.current().kid(), first.kid(), "nothing read before it is needed");

        let found = ring.find(rotated.kid()).unwrap().expect("the rotated key is found");
        assert_eq!(found.kid(), rotated.kid());
        assert_eq!(ring.current().kid(), rotated.kid(), "and signs from now on");
        assert!(ring.find(first.kid()).unwrap().is_some(), "the previous key still verifies");
        let kids: Vec<String> = ring.jwks().unwrap()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_owned()).collect();
        assert_eq!(kids, [first.kid(), rotated.kid()], "both served, the current one last");
        assert!(ring.find("local-unknown").unwrap().is_none(), "an unknown kid stays unknown");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_file_keeps_the_keys_and_a_corrupt_one_is_an_error_that_keeps_them_too() {
        let dir = scratch_dir();
        let ring = KeyRing::load_or_create(&dir).unwrap();
        let kid = ring.current().kid().to_owned();
        std::fs::remove_file(dir.join(KEY_FILE)).unwrap();
        assert!(ring.find("local-other").unwrap().is_none());
        assert_eq!(ring.jwks().unwrap()["keys"][0]["kid"], kid.as_str());

        std::fs::write(dir.join(KEY_FILE), b"not a key").unwrap();
        let error = ring.find("local-other").expect_err("a corrupt key file is reported").to_string();
        assert!(error.contains(KEY_FILE), "names the file: {error}");
        assert!(ring.jwks().is_err());
        assert_eq!(ring.current().kid(), kid, "the keys served so far stay");
        assert!(ring.find(&kid).unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_ring_without_a_file_has_its_one_key() {
        let ring = KeyRing::of_pkcs8(&IssuerKey::generate_pkcs8().unwrap()).unwrap();
        let kid = ring.current().kid().to_owned();
        assert!(ring.find(&kid).unwrap().is_some());
        assert!(ring.find("local-other").unwrap().is_none());
        assert_eq!(ring.jwks().unwrap()["keys"].as_array().map(Vec::len), Some(1));
    }
}
