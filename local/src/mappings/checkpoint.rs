//! A stream mapping's checkpoint, kept across restarts as Lambda keeps it: per shard, the
//! sequence number of the last record the mapping is done with (acknowledged by the function,
//! dropped by the filter, or sent to the on-failure destination). On restart the mapping reads
//! each shard `AFTER_SEQUENCE_NUMBER` of its checkpoint, so nothing already acknowledged is
//! delivered again; shards without a checkpoint start at `TRIM_HORIZON`.
//!
//! One small JSON file per mapping, `<state dir>/checkpoints/<Function>.<Event>.json`:
//!
//! ```text
//! {"stream_arn": "arn:aws:dynamodb:…/stream/2026-…", "shards": {"shardId-…": "000…123"}}
//! ```
//!
//! written atomically (a temporary file in the same directory, then `rename`), so a crash leaves
//! the old or the new checkpoint, never a torn one. A checkpoint of another stream (the table
//! was re-created, or the emulator restarted: a new stream ARN) is ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Errors reading or writing a checkpoint file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be read, written or renamed.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a checkpoint.
    #[error("checkpoint {path} is not a checkpoint file: {source}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
}

#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Contents {
    stream_arn: String,
    shards: BTreeMap<String, String>,
}

/// The checkpoint file of one mapping on one stream.
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    path: PathBuf,
    stream_arn: String,
}

impl CheckpointFile {
    /// The checkpoint of mapping `<function>.<event>` on `stream_arn`, under `state_dir`.
    pub fn new(state_dir: &Path, function: &str, event: &str, stream_arn: &str) -> Self {
        Self { path: state_dir.join("checkpoints").join(format!("{function}.{event}.json")), stream_arn: stream_arn.to_owned() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sequence number per shard; empty when there is no file or it belongs to another stream.
    ///
    /// # Errors
    /// [`CheckpointError`] when the file exists but cannot be read or parsed.
    pub fn load(&self) -> Result<BTreeMap<String, String>, CheckpointError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(source) => return Err(CheckpointError::Io { path: self.path.clone(), source }),
        };
        let contents: Contents = serde_json::from_str(&text).map_err(|source| CheckpointError::Malformed { path: self.path.clone(), source })?;
        Ok(if contents.stream_arn == self.stream_arn { contents.shards } else { BTreeMap::new() })
    }

    /// Replaces the checkpoint with `shards`, atomically.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when the directory, the temporary file or the rename fails.
    pub fn save(&self, shards: &BTreeMap<String, String>) -> Result<(), CheckpointError> {
        let io = |source| CheckpointError::Io { path: self.path.clone(), source };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let contents = Contents { stream_arn: self.stream_arn.clone(), shards: shards.clone() };
        // Serialising a struct of strings cannot fail.
        let text = serde_json::to_string(&contents).unwrap_or_default();
        let tmp = self.path.with_extension(format!("json.tmp-{}", std::process::id()));
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)
    }
}

impl From<CheckpointError> for crate::Error {
    fn from(e: CheckpointError) -> Self {
        Self::Part(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("outbox-local-checkpoint-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn a_saved_checkpoint_is_loaded_for_the_same_stream_only() {
        let dir = dir();
        let file = CheckpointFile::new(&dir, "Relay", "Stream", "arn:stream/1");
        assert!(file.load().expect("no file is no checkpoint").is_empty());
        let shards: BTreeMap<String, String> = [("shard-a".to_owned(), "100".to_owned()), ("shard-b".to_owned(), "7".to_owned())].into();
        file.save(&shards).expect("saved");
        assert_eq!(file.load().expect("loaded"), shards);
        let moved_on: BTreeMap<String, String> = [("shard-a".to_owned(), "200".to_owned())].into();
        file.save(&moved_on).expect("replaced");
        assert_eq!(file.load().expect("loaded"), moved_on, "the whole checkpoint is replaced");
        let leftovers: Vec<_> = std::fs::read_dir(dir.join("checkpoints")).expect("the directory").flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind: {leftovers:?}");
        let other_stream = CheckpointFile::new(&dir, "Relay", "Stream", "arn:stream/2");
        assert!(other_stream.load().expect("readable").is_empty(), "a re-created table's stream starts afresh");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_torn_or_foreign_file_is_an_error_naming_it() {
        let dir = dir();
        let file = CheckpointFile::new(&dir, "Relay", "Stream", "arn:stream/1");
        std::fs::create_dir_all(file.path().parent().expect("a parent")).expect("the directory");
        std::fs::write(file.path(), "{\"stream_arn\": ").expect("written");
        let err = file.load().expect_err("not a checkpoint").to_string();
        assert!(err.contains("Relay.Stream.json") && err.contains("is not a checkpoint file"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
