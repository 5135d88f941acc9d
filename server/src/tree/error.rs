//! [`TreeError`]: why a tree operation was refused.

use super::NodeId;

/// Errors of tree operations; the HTTP layer maps them to status codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("node {0} not found")]
    NodeNotFound(NodeId),
    #[error("Cannot delete root node")]
    DeleteRoot,
    #[error("node {0} is running; wait for it to finish")]
    Running(NodeId),
    #[error("{0}")]
    InvalidOp(String),
    #[error("this tree has used every node id; export it and import the export into a new tree")]
    IdsExhausted,
    /// The store could not give a node back.
    #[error("{0}")]
    Store(String),
    /// What the store holds of a node is damaged (names the tree, the node and the file).
    #[error("{0}")]
    Damaged(String),
    /// An import beyond a size cap or the memory budget (names the node and the entry).
    #[error("{0}")]
    TooLarge(String),
}

impl From<crate::store::SourceError> for TreeError {
    fn from(e: crate::store::SourceError) -> Self {
        match e {
            crate::store::SourceError::Store(e) => TreeError::Store(e.to_string()),
            crate::store::SourceError::Damaged(m) => TreeError::Damaged(m),
        }
    }
}
