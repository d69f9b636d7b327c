//! A World of one: a process started by hand.

use std::collections::HashMap;
use std::sync::Mutex;

use rma_core::{Bootstrap, Rank, TransportError};

/// Bootstrap of a process with no launcher.
#[derive(Debug)]
pub struct Single {
    job: String,
    node: String,
    kv: Mutex<HashMap<String, Vec<u8>>>,
    tags: rma_core::bootstrap::Tags,
}

impl Single {
    /// Rank 0 of 1.
    pub fn new() -> Single {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Single {
            job: format!("s{}x{nanos}", std::process::id()),
            node: super::node_id(),
            kv: Mutex::new(HashMap::new()),
            tags: rma_core::bootstrap::Tags::default(),
        }
    }
}

impl Default for Single {
    fn default() -> Self {
        Self::new()
    }
}

impl Bootstrap for Single {
    fn tags(&self) -> Option<&rma_core::bootstrap::Tags> {
        Some(&self.tags)
    }
    fn rank(&self) -> Rank {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn job_id(&self) -> &str {
        &self.job
    }
    fn node_id(&self) -> &str {
        &self.node
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        self.kv
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.into(), value.to_vec());
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        self.kv
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
            .ok_or_else(|| TransportError::Failed(format!("key {key} was never put")))
    }
    fn barrier(&self) -> Result<(), TransportError> {
        Ok(())
    }
}
