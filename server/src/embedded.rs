//! The shipped assets (scenarios, market data, ABM examples, the Python worker) and the web UI,
//! inside the binary, so that a copied or `cargo install`ed `simtree` works from any folder.
//!
//! Everything that reads assets wants real files (the ABM worker runs a script from disk in its
//! sandbox; scenario folders can be replaced with `--assets`), so the embedded trees are written
//! once to a cache folder keyed by their content — `$SIMTREE_CACHE`, else
//! `$XDG_CACHE_HOME/simtree`, else `~/.cache/simtree` — and used from there. A checkout's own
//! `assets/` and `frontend/dist` still take precedence (see [`assets_dir`] and
//! `http::default_static_dir`), so development sees edits without a rebuild. When the cache folder
//! cannot be written, the error says which folder and why (not that some other folder is
//! missing).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use include_dir::{Dir, include_dir};

static ASSETS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../assets");
static UI: Dir<'_> = include_dir!("$OUT_DIR/dist");

/// Why the embedded trees could not be extracted to the cache folder.
#[derive(Clone, Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("no cache folder to extract the shipped assets to: set SIMTREE_CACHE (or HOME), or pass --assets DIR")]
    NoCacheFolder,
    #[error(
        "cannot write the shipped assets to the cache folder {}: {cause} (set SIMTREE_CACHE to a writable folder, or pass --assets DIR)",
        .path.display()
    )]
    Write { path: PathBuf, cause: String },
}

/// The folder holding this build's extracted trees: `<cache>/<version>-<content hash>`.
fn release_dir() -> Result<&'static PathBuf, EmbedError> {
    static DIR: OnceLock<Result<PathBuf, EmbedError>> = OnceLock::new();
    DIR.get_or_init(|| extract_release(&cache_dir().ok_or(EmbedError::NoCacheFolder)?)).as_ref().map_err(Clone::clone)
}

/// Extracts this build's trees under `base` unless a complete copy is there already.
fn extract_release(base: &Path) -> Result<PathBuf, EmbedError> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for dir in [&ASSETS, &UI] {
        for f in files(dir) {
            f.path().hash(&mut h);
            f.contents().hash(&mut h);
        }
    }
    let dir = base.join(format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), h.finish()));
    if !dir.join(".complete").exists() {
        extract(&ASSETS, &dir.join("assets"))?;
        extract(&UI, &dir.join("dist"))?;
        write(&dir.join(".complete"), b"")?;
    }
    Ok(dir)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), EmbedError> {
    std::fs::write(path, bytes).map_err(|e| EmbedError::Write { path: path.to_path_buf(), cause: e.to_string() })
}

fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("SIMTREE_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("simtree")))
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("simtree")))
}

fn files<'a>(dir: &'a Dir<'a>) -> Vec<&'a include_dir::File<'a>> {
    let mut out: Vec<_> = dir.files().collect();
    for d in dir.dirs() {
        out.extend(files(d));
    }
    out
}

fn extract(dir: &Dir<'_>, to: &Path) -> Result<(), EmbedError> {
    for f in files(dir) {
        let path = to.join(f.path());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| EmbedError::Write { path: parent.to_path_buf(), cause: e.to_string() })?;
        }
        write(&path, f.contents())?;
    }
    Ok(())
}

/// The embedded assets, extracted (the folder holding `scenarios/`, `data/`, `python/`, …).
pub(crate) fn assets() -> Result<PathBuf, EmbedError> {
    Ok(release_dir()?.join("assets"))
}

/// The assets folder: `$SIMTREE_ASSETS`, else `./assets` when present, else the checkout this
/// binary was built from when it is still there, else the copy embedded in the binary (extracted
/// to the cache folder; an error names that folder when it cannot be written).
pub fn assets_dir() -> Result<PathBuf, EmbedError> {
    if let Some(dir) = std::env::var_os("SIMTREE_ASSETS") {
        return Ok(dir.into());
    }
    let local = PathBuf::from("assets");
    if local.join("scenarios").is_dir() {
        return Ok(local);
    }
    let checkout = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets"));
    if checkout.join("scenarios").is_dir() {
        return Ok(checkout);
    }
    assets()
}

/// The embedded web UI, extracted; `None` when this binary was built without one.
pub(crate) fn ui() -> Option<PathBuf> {
    let dir = release_dir().ok()?.join("dist");
    dir.join("index.html").is_file().then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache folder that cannot be made (here: under a regular file, which even root cannot
    /// write into, as with a HOME that is not a folder) is named in the error, with the cause.
    #[test]
    fn an_unwritable_cache_folder_is_named() {
        let home = std::env::temp_dir().join(format!("simtree-embed-home-{}", std::process::id()));
        std::fs::write(&home, b"not a folder").unwrap();
        let base = home.join(".cache").join("simtree");
        let err = extract_release(&base).unwrap_err().to_string();
        let _ = std::fs::remove_file(&home);
        assert!(err.contains("cannot write the shipped assets to the cache folder"), "{err}");
        assert!(err.contains(&home.display().to_string()), "names the folder: {err}");
        assert!(err.contains("SIMTREE_CACHE"), "says what to do: {err}");
        assert!(!err.contains("cannot read"), "{err}");
    }
}
