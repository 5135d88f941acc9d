//! The shipped assets (scenarios, market data, ABM examples, the Python worker) and the web UI,
//! inside the binary, so that a copied or `cargo install`ed `simtree` works from any folder.
//!
//! Everything that reads assets wants real files (the ABM worker runs a script from disk in its
//! sandbox; scenario folders can be replaced with `--assets`), so the embedded trees are written
//! once to a cache folder keyed by their content — `$SIMTREE_CACHE`, else
//! `$XDG_CACHE_HOME/simtree`, else `~/.cache/simtree` — and used from there. A checkout's own
//! `assets/` and `frontend/dist` still take precedence (see `scenario::assets_dir` and
//! `http::default_static_dir`), so development sees edits without a rebuild.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use include_dir::{Dir, include_dir};

static ASSETS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../assets");
static UI: Dir<'_> = include_dir!("$OUT_DIR/dist");

/// The folder holding this build's extracted trees: `<cache>/<version>-<content hash>`.
fn release_dir() -> Result<&'static PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for dir in [&ASSETS, &UI] {
            for f in files(dir) {
                f.path().hash(&mut h);
                f.contents().hash(&mut h);
            }
        }
        let base = cache_dir().ok_or("no cache folder: set SIMTREE_CACHE or HOME")?;
        let dir = base.join(format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), h.finish()));
        if !dir.join(".complete").exists() {
            extract(&ASSETS, &dir.join("assets"))?;
            extract(&UI, &dir.join("dist"))?;
            std::fs::write(dir.join(".complete"), b"").map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        Ok(dir)
    })
    .as_ref()
    .map_err(Clone::clone)
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

fn extract(dir: &Dir<'_>, to: &Path) -> Result<(), String> {
    for f in files(dir) {
        let path = to.join(f.path());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, f.contents()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The embedded assets, extracted (the folder holding `scenarios/`, `data/`, `python/`, …).
pub fn assets() -> Result<PathBuf, String> {
    Ok(release_dir()?.join("assets"))
}

/// The embedded web UI, extracted; `None` when this binary was built without one.
pub fn ui() -> Option<PathBuf> {
    let dir = release_dir().ok()?.join("dist");
    dir.join("index.html").is_file().then_some(dir)
}
