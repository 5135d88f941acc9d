//! `cargo xtask dist`: the web UI in `frontend/dist`, written so that a second build with nothing
//! changed touches nothing.
//!
//! The server embeds `frontend/dist` (its build script watches the folder's mtimes), so rewriting
//! the same bytes there costs a whole release build of the server. Hence:
//!
//! * wasm-bindgen writes into a staging folder under the target folder, and only the files whose
//!   bytes differ are written into `frontend/dist` (unchanged files keep their mtimes; files no
//!   longer built are removed);
//! * a stamp beside the staging folder records what the last build was made from (a hash of the
//!   static sources, the settings and this xtask binary; the compiled wasm's size, mtime and hash)
//!   and the size and mtime of every file it left in `frontend/dist`: when both still match,
//!   wasm-bindgen and the compressors do not run at all (the wasm is hashed only when its size or
//!   mtime changed, so the check reads next to nothing);
//! * when only some inputs changed, what can be kept is: wasm-bindgen's output when the wasm and
//!   the recipe are the same (an edit of style.css or index.html alone), and a compressed file
//!   (`.br`, `.gz`) whose source and settings are the ones it was made from (brotli at its
//!   strongest over the release wasm is most of the time of a release build).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;
use std::path::Path;
use std::time::Instant;

use crate::{cargo, root, run, target_dir};

/// The files copied from `frontend/` as they are.
const STATIC: [&str; 2] = ["index.html", "style.css"];

/// The files compressed beside themselves for the server to send as they are.
const COMPRESSED: [&str; 3] = ["simtree_frontend_bg.wasm", "simtree_frontend.js", "style.css"];

/// Builds the web UI: the frontend crate for wasm32, then wasm-bindgen (as a library) with
/// index.html and the stylesheet, and the wasm, its JS and the stylesheet compressed beside
/// themselves, into `frontend/dist` (writing only what changed).
pub fn build(release: bool) -> Result<(), String> {
    let started = Instant::now();
    let root = root();
    let profile = if release { "wasm-release" } else { "dev" };
    let mut cargo_build = cargo();
    cargo_build.args([
        "build",
        "-p",
        "simtree-frontend",
        "--lib",
        "--target",
        "wasm32-unknown-unknown",
        "--profile",
        profile,
    ]);
    run(cargo_build)?;
    let compiled = started.elapsed();
    let dir = if release { "wasm-release" } else { "debug" };
    let wasm = target_dir().join("wasm32-unknown-unknown").join(dir).join("simtree_frontend.wasm");
    let out = root.join("frontend/dist");
    // Per checkout: worktrees may share one target folder.
    let work = target_dir().join("xtask-dist").join(format!("{:016x}", hash(out.as_os_str().as_encoded_bytes())));
    let stamp_path = work.join("stamp");
    let names = release && std::env::var_os("SIMTREE_WASM_NAMES").is_none();
    let recipe = recipe_hash(release, names);
    let settings = settings_hash(recipe, &root.join("frontend"))?;
    let wasm_meta = Meta::of(&wasm).ok_or_else(|| format!("{}: not built", wasm.display()))?;
    let old = std::fs::read_to_string(&stamp_path).ok().and_then(|s| Stamp::parse(&s));
    // The wasm's bytes are hashed only when its size or mtime differ from the last build's (98 MB
    // for a debug build).
    let wasm_hash = match &old {
        Some(old) if old.wasm.0 == wasm_meta => old.wasm.1,
        _ => hash_file(&wasm)?,
    };
    if let Some(old) = &old
        && old.settings == settings
        && old.wasm.1 == wasm_hash
        && old.matches(&out)
    {
        if old.wasm.0 != wasm_meta {
            // The same bytes again (a relink): remember the new mtime.
            let stamp = Stamp { wasm: (wasm_meta, wasm_hash), ..old.clone() };
            write_stamp(&work, &stamp)?;
        }
        eprintln!(
            "xtask: web UI up to date in {} (cargo build {:.1?}, checked in {:.1?}; nothing written)",
            out.display(),
            compiled,
            started.elapsed() - compiled
        );
        return Ok(());
    }

    let bindgen_started = Instant::now();
    // wasm-bindgen's output, from the last build when it was made from the same wasm by the same
    // recipe and is still as written (only the static sources changed), else made again.
    let bindgen_key = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write_u64(recipe);
        h.write_u64(wasm_hash);
        h.finish().max(1)
    };
    let previous = old.as_ref().and_then(|s| s.reuse_all(&out, bindgen_key));
    let bindgen_ran = previous.is_none();
    let mut files = match previous {
        Some(files) => files,
        None => {
            let staging = work.join("staging");
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
            wasm_bindgen_cli_support::Bindgen::new()
                .input_path(&wasm)
                .web(true)
                .map_err(|e| e.to_string())?
                .typescript(false)
                // The library defaults to omitting the default module path; without it init()
                // cannot find the .wasm file.
                .omit_default_module_path(false)
                .debug(!release)
                // Function names are half the release wasm and only help a debugger or a profile
                // (SIMTREE_WASM_NAMES=1 keeps them).
                .remove_name_section(names)
                .generate(&staging)
                .map_err(|e| format!("wasm-bindgen: {e}"))?;
            let files = read_tree(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
            let _ = std::fs::remove_dir_all(&staging);
            files
        }
    };
    let mut made_from: BTreeMap<String, u64> = files.keys().map(|name| (name.clone(), bindgen_key)).collect();
    for file in STATIC {
        let path = root.join("frontend").join(file);
        files.insert(file.into(), std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?);
        made_from.remove(file);
    }
    let bindgen = bindgen_started.elapsed();

    let compress_started = Instant::now();
    let (mut compressed, mut kept) = (0, 0);
    for name in COMPRESSED {
        let data = files.get(name).ok_or_else(|| format!("wasm-bindgen wrote no {name}"))?.clone();
        let data_hash = hash(&data);
        for codec in [Codec::Brotli, Codec::Gzip] {
            let target = format!("{name}{}", codec.extension());
            let key = codec.key(data_hash, release);
            let previous = old.as_ref().and_then(|s| s.reusable(&out, &target, key));
            let bytes = match previous {
                Some(bytes) => {
                    kept += 1;
                    bytes
                }
                None => {
                    compressed += 1;
                    codec.compress(&data, release).map_err(|e| format!("compressing {name}: {e}"))?
                }
            };
            made_from.insert(target.clone(), key);
            files.insert(target, bytes);
        }
    }
    let compression = compress_started.elapsed();

    let report = sync_dir(&out, &files).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut recorded = BTreeMap::new();
    for name in files.keys() {
        let meta =
            Meta::of(&out.join(name)).ok_or_else(|| format!("{}: cannot read it back", out.join(name).display()))?;
        recorded.insert(name.clone(), (made_from.get(name).copied().unwrap_or(0), meta));
    }
    write_stamp(&work, &Stamp { settings, wasm: (wasm_meta, wasm_hash), files: recorded })?;
    eprintln!(
        "xtask: web UI built in {:.1?} into {} (cargo build {:.1?}, wasm-bindgen {:.1?}{}, compression {:.1?} \
         [{compressed} compressed, {kept} kept]; {} written, {} unchanged, {} removed)",
        started.elapsed(),
        out.display(),
        compiled,
        bindgen,
        if bindgen_ran { "" } else { " [its last output kept]" },
        compression,
        report.written,
        report.unchanged,
        report.removed
    );
    Ok(())
}

/// A 64-bit hash of bytes (std's SipHash with fixed keys: stable for one toolchain, which is all a
/// stamp needs; a different toolchain only means one more build).
fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

fn hash_file(path: &Path) -> Result<u64, String> {
    Ok(hash(&std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?))
}

/// How the files in `frontend/dist` are made: the settings, and this xtask binary (its size and
/// mtime: a changed recipe means a new binary).
fn recipe_hash(release: bool, names: bool) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(env!("CARGO_PKG_VERSION").as_bytes());
    h.write_u8(release.into());
    h.write_u8(names.into());
    if let Some(exe) = std::env::current_exe().ok().and_then(|p| Meta::of(&p)) {
        h.write_u64(exe.len);
        h.write_u128(exe.mtime);
    }
    h.finish()
}

/// What the files in `frontend/dist` are made from besides the compiled wasm: the recipe and the
/// static sources.
fn settings_hash(recipe: u64, frontend: &Path) -> Result<u64, String> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write_u64(recipe);
    for file in STATIC {
        h.write_u64(hash_file(&frontend.join(file))?);
    }
    Ok(h.finish())
}

fn write_stamp(work: &Path, stamp: &Stamp) -> Result<(), String> {
    std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
    let path = work.join("stamp");
    std::fs::write(&path, stamp.format()).map_err(|e| format!("{}: {e}", path.display()))
}

/// A file's size and mtime (in nanoseconds since the epoch), which change when it is written:
/// what cargo looks at too.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Meta {
    len: u64,
    mtime: u128,
}

impl Meta {
    fn of(path: &Path) -> Option<Meta> {
        let meta = std::fs::metadata(path).ok()?;
        let mtime = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(Meta { len: meta.len(), mtime: mtime.as_nanos() })
    }
}

#[derive(Clone, Copy)]
enum Codec {
    Brotli,
    Gzip,
}

impl Codec {
    fn extension(self) -> &'static str {
        match self {
            Codec::Brotli => ".br",
            Codec::Gzip => ".gz",
        }
    }

    /// Brotli quality (11 or 5, window 2^24) or gzip level (9 or 6): a release build gets the
    /// strongest settings, a debug build, whose wasm is 8 MB, fast ones.
    fn level(self, release: bool) -> u32 {
        match (self, release) {
            (Codec::Brotli, true) => 11,
            (Codec::Brotli, false) => 5,
            (Codec::Gzip, true) => 9,
            (Codec::Gzip, false) => 6,
        }
    }

    /// What a compressed file is made from: its source's bytes (their [`hash`]), the codec and
    /// its level.
    fn key(self, data_hash: u64, release: bool) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write(self.extension().as_bytes());
        h.write_u32(self.level(release));
        h.write_u64(data_hash);
        // 0 stands for "not compressed" in the stamp.
        h.finish().max(1)
    }

    fn compress(self, data: &[u8], release: bool) -> std::io::Result<Vec<u8>> {
        use std::io::Write;
        match self {
            Codec::Brotli => {
                let params = brotli::enc::BrotliEncoderParams {
                    quality: self.level(release) as i32,
                    lgwin: 24,
                    ..Default::default()
                };
                let mut br = Vec::new();
                brotli::BrotliCompress(&mut &data[..], &mut br, &params)?;
                Ok(br)
            }
            Codec::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(self.level(release)));
                gz.write_all(data)?;
                gz.finish()
            }
        }
    }
}

/// The last build of one checkout's `frontend/dist`: the [`settings_hash`], the compiled wasm's
/// [`Meta`] and hash, and for each file written (by its path under the folder, `/`-separated)
/// what it was made from (for wasm-bindgen's output a hash of the recipe and the wasm, for a
/// compressed file its [`Codec::key`], for a static source 0) and its [`Meta`] once written.
#[derive(Clone, Debug, PartialEq)]
struct Stamp {
    settings: u64,
    wasm: (Meta, u64),
    files: BTreeMap<String, (u64, Meta)>,
}

impl Stamp {
    fn format(&self) -> String {
        let (wasm, wasm_hash) = self.wasm;
        let mut s = format!("settings {:016x}\nwasm {} {} {wasm_hash:016x}\n", self.settings, wasm.len, wasm.mtime);
        for (name, (made_from, meta)) in &self.files {
            s.push_str(&format!("{made_from:016x} {} {} {name}\n", meta.len, meta.mtime));
        }
        s
    }

    fn parse(text: &str) -> Option<Stamp> {
        let mut lines = text.lines();
        let settings = u64::from_str_radix(lines.next()?.strip_prefix("settings ")?, 16).ok()?;
        let mut wasm = lines.next()?.strip_prefix("wasm ")?.split(' ');
        let wasm_meta = Meta { len: wasm.next()?.parse().ok()?, mtime: wasm.next()?.parse().ok()? };
        let wasm_hash = u64::from_str_radix(wasm.next()?, 16).ok()?;
        let mut files = BTreeMap::new();
        for line in lines {
            let mut parts = line.splitn(4, ' ');
            let made_from = u64::from_str_radix(parts.next()?, 16).ok()?;
            let meta = Meta { len: parts.next()?.parse().ok()?, mtime: parts.next()?.parse().ok()? };
            files.insert(parts.next()?.to_string(), (made_from, meta));
        }
        Some(Stamp { settings, wasm: (wasm_meta, wasm_hash), files })
    }

    /// Whether `dir` holds exactly the files recorded, each as it was written (size and mtime).
    fn matches(&self, dir: &Path) -> bool {
        match list_tree(dir) {
            Ok(names) => {
                names.len() == self.files.len()
                    && names.iter().all(|name| {
                        self.files.get(name).is_some_and(|&(_, meta)| Meta::of(&dir.join(name)) == Some(meta))
                    })
            }
            Err(_) => false,
        }
    }

    /// The files made from `key`, by name with their bytes, when there are some and all are still
    /// as they were written.
    fn reuse_all(&self, dir: &Path, key: u64) -> Option<BTreeMap<String, Vec<u8>>> {
        let files: Option<BTreeMap<_, _>> = self
            .files
            .iter()
            .filter(|(_, (made_from, _))| *made_from == key)
            .map(|(name, _)| Some((name.clone(), self.reusable(dir, name, key)?)))
            .collect();
        files.filter(|f| !f.is_empty())
    }

    /// The bytes of `dir/name` when the stamp says they were made from `key` and the file is
    /// still as it was written.
    fn reusable(&self, dir: &Path, name: &str, key: u64) -> Option<Vec<u8>> {
        let &(made_from, meta) = self.files.get(name)?;
        if made_from != key || Meta::of(&dir.join(name)) != Some(meta) {
            return None;
        }
        std::fs::read(dir.join(name)).ok()
    }
}

/// The paths of the files under `dir`, `/`-separated and relative to it.
fn list_tree(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type()?.is_dir() {
                walk(&entry.path(), &format!("{name}/"), out)?;
            } else {
                out.insert(name);
            }
        }
        Ok(())
    }
    let mut out = BTreeSet::new();
    walk(dir, "", &mut out)?;
    Ok(out)
}

/// The files under `dir` with their bytes (see [`list_tree`]).
fn read_tree(dir: &Path) -> std::io::Result<BTreeMap<String, Vec<u8>>> {
    list_tree(dir)?.into_iter().map(|name| Ok((name.clone(), std::fs::read(dir.join(&name))?))).collect()
}

/// Writes `bytes` to `path` unless it holds them already (then its mtime is kept). Returns whether
/// it wrote.
fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, bytes)?;
    Ok(true)
}

#[derive(Debug, Default, PartialEq)]
struct SyncReport {
    written: usize,
    unchanged: usize,
    removed: usize,
}

/// Makes `dir` hold exactly `files` (by `/`-separated relative path), touching only what differs:
/// files with other bytes are written, files not in `files` removed (and folders they leave
/// empty), the rest left alone.
fn sync_dir(dir: &Path, files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<SyncReport> {
    let mut report = SyncReport::default();
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in files {
        if write_if_changed(&dir.join(name), bytes)? {
            report.written += 1;
        } else {
            report.unchanged += 1;
        }
    }
    fn prune(dir: &Path, prefix: &str, keep: &BTreeSet<&str>, removed: &mut usize) -> std::io::Result<bool> {
        let mut empty = true;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type()?.is_dir() {
                if prune(&entry.path(), &format!("{name}/"), keep, removed)? {
                    std::fs::remove_dir(entry.path())?;
                } else {
                    empty = false;
                }
            } else if keep.contains(name.as_str()) {
                empty = false;
            } else {
                std::fs::remove_file(entry.path())?;
                *removed += 1;
            }
        }
        Ok(empty)
    }
    let keep: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    prune(dir, "", &keep, &mut report.removed)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::{Duration, SystemTime};

    /// A fresh folder under the system's temporary folder, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("xtask-dist-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mtime(path: &Path) -> SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    /// Sets a file's mtime an hour back, so that a rewrite would show.
    fn age(path: &Path) -> SystemTime {
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(path).unwrap().set_modified(old).unwrap();
        mtime(path)
    }

    fn tree(entries: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
        entries.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect()
    }

    #[test]
    fn write_if_changed_writes_new_and_different_bytes_only() {
        let dir = TempDir::new("write");
        let path = dir.0.join("sub/a.txt");
        assert!(write_if_changed(&path, b"one").unwrap(), "a new file (and its folder) is written");
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        let before = age(&path);
        assert!(!write_if_changed(&path, b"one").unwrap(), "the same bytes are not written");
        assert_eq!(mtime(&path), before, "an unchanged file keeps its mtime");
        assert!(write_if_changed(&path, b"two").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_ne!(mtime(&path), before);
        assert!(write_if_changed(&path, b"").unwrap(), "a shorter content is a change");
        assert_eq!(std::fs::read(&path).unwrap(), b"");
    }

    #[test]
    fn sync_dir_touches_only_what_differs() {
        let dir = TempDir::new("sync");
        let out = dir.0.join("dist");
        let first = tree(&[
            ("index.html", b"<html>"),
            ("app.wasm", b"wasm"),
            ("app.wasm.br", b"br"),
            ("snippets/x/inline0.js", b"js"),
        ]);
        let report = sync_dir(&out, &first).unwrap();
        assert_eq!(report, SyncReport { written: 4, unchanged: 0, removed: 0 });
        assert_eq!(read_tree(&out).unwrap(), first);
        let times: Vec<SystemTime> = first.keys().map(|n| age(&out.join(n))).collect();
        let dir_time = {
            std::fs::File::open(&out).unwrap().set_modified(SystemTime::now() - Duration::from_secs(3600)).ok();
            mtime(&out)
        };

        // The same files again: nothing written, every mtime (the folder's too) kept.
        let report = sync_dir(&out, &first).unwrap();
        assert_eq!(report, SyncReport { written: 0, unchanged: 4, removed: 0 });
        let again: Vec<SystemTime> = first.keys().map(|n| mtime(&out.join(n))).collect();
        assert_eq!(again, times);
        assert_eq!(mtime(&out), dir_time);

        // One file changed, one gone (with its folders), one new.
        let second =
            tree(&[("index.html", b"<html>"), ("app.wasm", b"wasm2"), ("app.wasm.br", b"br"), ("app.js", b"js")]);
        let report = sync_dir(&out, &second).unwrap();
        assert_eq!(report, SyncReport { written: 2, unchanged: 2, removed: 1 });
        assert_eq!(read_tree(&out).unwrap(), second);
        assert!(!out.join("snippets").exists(), "an emptied folder is removed");
        assert_eq!(mtime(&out.join("index.html")), times[2]);
    }

    #[test]
    fn stamp_round_trips_and_checks_the_folder() {
        let dir = TempDir::new("stamp");
        let files = tree(&[("a.js", b"a"), ("a.js.gz", b"gz"), ("sub/b.css", b"b")]);
        sync_dir(&dir.0, &files).unwrap();
        // Aged, so that a rewrite shows even within the file system's clock granularity.
        let record = || -> BTreeMap<String, (u64, Meta)> {
            files
                .keys()
                .map(|n| {
                    age(&dir.0.join(n));
                    let made_from = if n.ends_with(".gz") { 7 } else { 0 };
                    (n.clone(), (made_from, Meta::of(&dir.0.join(n)).unwrap()))
                })
                .collect()
        };
        let stamp = Stamp {
            settings: 0xdead_beef,
            wasm: (Meta { len: 34, mtime: 1_700_000_000_123_456_789 }, 0x0123_4567_89ab_cdef),
            files: record(),
        };
        assert_eq!(Stamp::parse(&stamp.format()).as_ref(), Some(&stamp));
        assert!(stamp.matches(&dir.0));
        assert_eq!(Stamp::parse("garbage"), None);
        assert_eq!(Stamp::parse(""), None);

        // Reuse of a compressed file: only with the same key and the file as written.
        assert_eq!(stamp.reusable(&dir.0, "a.js.gz", 7), Some(b"gz".to_vec()));
        assert_eq!(stamp.reusable(&dir.0, "a.js.gz", 8), None);
        assert_eq!(stamp.reusable(&dir.0, "missing.gz", 7), None);
        assert_eq!(stamp.reuse_all(&dir.0, 7), Some(tree(&[("a.js.gz", b"gz")])));
        assert_eq!(stamp.reuse_all(&dir.0, 8), None, "nothing made from that");

        std::fs::write(dir.0.join("a.js.gz"), b"GZ").unwrap();
        assert!(!stamp.matches(&dir.0), "a file written since, even with as many bytes");
        assert_eq!(stamp.reusable(&dir.0, "a.js.gz", 7), None);
        assert_eq!(stamp.reuse_all(&dir.0, 7), None);
        let stamp = Stamp { files: record(), ..stamp };
        assert!(stamp.matches(&dir.0));
        std::fs::write(dir.0.join("extra"), b"").unwrap();
        assert!(!stamp.matches(&dir.0), "a file not recorded");
        std::fs::remove_file(dir.0.join("extra")).unwrap();
        assert!(stamp.matches(&dir.0));
        std::fs::remove_file(dir.0.join("sub/b.css")).unwrap();
        assert!(!stamp.matches(&dir.0), "a file missing");
        assert!(!stamp.matches(&dir.0.join("nowhere")));
    }

    #[test]
    fn compression_round_trips_and_keys_differ_by_settings() {
        let data = b"simtree simtree simtree simtree".repeat(100);
        for codec in [Codec::Brotli, Codec::Gzip] {
            let packed = codec.compress(&data, false).unwrap();
            assert!(packed.len() < data.len());
            let h = hash(&data);
            assert_ne!(codec.key(h, false), codec.key(h, true));
            assert_ne!(codec.key(h, false), codec.key(hash(b"other"), false));
            assert_ne!(codec.key(h, false), 0);
        }
        assert_ne!(Codec::Brotli.key(hash(&data), true), Codec::Gzip.key(hash(&data), true));
        let packed = Codec::Gzip.compress(&data, true).unwrap();
        let mut gz = flate2::read::GzDecoder::new(&packed[..]);
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut gz, &mut plain).unwrap();
        assert_eq!(plain, data);
    }
}
