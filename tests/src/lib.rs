//! Black-box tests of the `simtree` binary live in `tests/tests/*.rs`; this library holds helpers
//! they share (locating the built binary).

use std::path::PathBuf;

/// Path of the `simtree` binary built for this workspace (debug profile).
pub fn simtree_bin() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    target.join("debug").join("simtree")
}
