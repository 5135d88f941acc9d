//! The SQLite store's commit journal: how a waited-for group of writes becomes durable with one
//! append to a file instead of a B-tree transaction.
//!
//! A run's end waits for its writes (node record, log, final state) to be durable before
//! `run_finish` is sent. Committing them to SQLite touches about ten pages of five B-trees
//! (~0.15 ms of the store thread's time on this machine, against ~0.25 ms for a whole
//! single-turn run, plus two hand-offs between threads). Instead each write is encoded as it is
//! queued, and a flush appends what was gathered to this file as one group — one `write`, ~10 µs,
//! on the caller's own thread — and returns. The store thread commits the queued writes with its
//! next group commit (within 5 ms, or before any read), many runs' ends in one transaction, which
//! also records the last group's number (`journal.applied`).
//!
//! Durability is SQLite's in `synchronous = NORMAL`: neither file is synced on commit, so a
//! group survives a crash of the process (kill -9), and after a power loss the database is
//! consistent at a group boundary. On start-up the groups after the recorded number are applied
//! in order; a torn or damaged record ends the replay (nothing after it was acknowledged before
//! it was); a group that cannot be applied leaves the journal aside, renamed, with an error in
//! the log.
//!
//! The journal keeps room allocated past its end ([`RESERVE`], preallocated without changing
//! the file's length): an ordinary group is appended only when that room stays, so that on a
//! full disk a roll-back's deletion still goes in ([`Journal::seal_alone`]). Rows of a node whose
//! end could not be stored may have reached the database or an earlier group before the disk
//! filled; without its deletion in the journal, a crash before the store recovers would bring
//! them back at the next start (issue #42: a refused fan-out came back as 32 `interrupted`
//! children).
//!
//! Record: magic (4 bytes), payload length (u32), group number (u64), CRC-32 of the number and
//! payload (u32), payload: the writes in the little binary form below. Integers are
//! little-endian. Once every group in it is in the database and it is past [`WRAP_BYTES`], the
//! journal starts over at its beginning, overwriting its own blocks: records left behind a newer
//! lap have smaller numbers and end a replay.
//!
//! A write is its tag (one byte, never reused) then its fields. Most kinds are one line of
//! `field_writes!` (tag, variant, fields in order), which makes both the encoder's and the
//! decoder's arm; the four with lists or JSON columns (tree, node, state, deleted nodes) are
//! written out by hand. `every_kind_of_write_keeps_its_bytes` holds each kind's bytes.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{NodeRow, StoreError, StoreResult, TreeRow, Write};

const MAGIC: [u8; 4] = *b"STJ1";
const HEADER: usize = 4 + 4 + 8 + 4;

/// Past this many bytes a fully applied journal starts over at its beginning.
const WRAP_BYTES: u64 = 4 << 20;

/// A write larger than this (encoded) is not journaled: the next flush commits it to the database
/// before answering, as without a journal (an imported node's whole log, not a run's end).
const MAX_WRITE_BYTES: usize = 16 << 20;

/// Gathered writes past this size are appended as a group without waiting for a flush.
pub const SEAL_BYTES: usize = 1 << 20;

/// Room kept allocated past the journal's end for roll-backs' deletions (a deletion of one
/// node is a 45-byte group; a subtree's takes 8 bytes more per node).
const RESERVE: u64 = 64 << 10;

/// A journaled group: its number and its writes.
pub(crate) type Group = (u64, Vec<Write>);

pub(crate) struct Journal {
    file: File,
    path: PathBuf,
    /// Where the next record goes.
    offset: u64,
    next_seq: u64,
    /// The group being gathered: its header's room, then its writes.
    buf: Vec<u8>,
    unjournaled: bool,
    /// The file's blocks are allocated up to here (past its length: the reserve); `None` on a
    /// filesystem that cannot preallocate, where no room is kept.
    allocated: Option<u64>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::from_io(format!("journal {}: {what}: {e}", path.display()), &e)
}

/// Takes the journal for this process: two servers on one data folder would write over each
/// other's records (and hand out the same node ids). The lock goes with the process.
fn lock(file: &File, path: &Path) -> StoreResult<()> {
    // SAFETY: flock on a descriptor this function's caller owns; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        let folder = path.parent().unwrap_or(path).display();
        return Err(StoreError::InUse(format!(
            "the data folder {folder} is in use by another simtree server; stop it, or give this one another --data folder"
        )));
    }
    Err(io("lock", path, e))
}

impl Journal {
    /// Opens (creating) the journal at `path` and returns it with the groups recorded after
    /// group `applied`, in order, still to be applied.
    ///
    /// A damaged record with acknowledged groups after it is an error (start-up stops, rather
    /// than drop what was acknowledged): `simtree data repair` opens it with [`Self::open_damaged`].
    pub(crate) fn open(path: &Path, applied: u64) -> StoreResult<(Journal, Vec<Group>)> {
        let (journal, pending, damage) = Self::open_damaged(path, applied)?;
        match damage {
            None => Ok((journal, pending)),
            Some(d) => Err(StoreError::Corrupt(format!(
                "{d}; start-up stops so that nothing acknowledged is dropped: run `simtree data check --data {folder}` \
                 to see what is affected, then `simtree data repair --data {folder}` to keep the intact groups and set the journal aside",
                folder = path.parent().unwrap_or(path).display()
            ))),
        }
    }

    /// [`Self::open`], with the groups before any damage and what the damage is.
    pub(crate) fn open_damaged(path: &Path, applied: u64) -> StoreResult<(Journal, Vec<Group>, Option<String>)> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("open", path, e))?;
        lock(&file, path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| io("read", path, e))?;
        let (pending, last, damage) = scan(&bytes, applied);
        let journal = Journal {
            file,
            path: path.to_path_buf(),
            offset: 0,
            next_seq: last.max(applied) + 1,
            buf: Vec::new(),
            unjournaled: false,
            allocated: Some(0),
        };
        let damage = damage.map(|d| format!("journal {}: {d}", path.display()));
        Ok((journal, pending, damage))
    }

    /// Adds a write to the group being gathered. A write too large to journal is left out, and
    /// [`Self::unjournaled`] says so until [`Self::discard`].
    pub(crate) fn stage(&mut self, w: &Write) {
        if self.buf.is_empty() {
            self.buf.extend_from_slice(&[0; HEADER]);
        }
        let before = self.buf.len();
        encode(&mut self.buf, w);
        if self.buf.len() - before > MAX_WRITE_BYTES {
            self.buf.truncate(before);
            self.unjournaled = true;
        }
    }

    /// Bytes gathered for the next group.
    pub(crate) fn staged_bytes(&self) -> usize {
        self.buf.len().saturating_sub(HEADER)
    }

    /// True when a write queued since the last [`Self::discard`] is not in the journal (too
    /// large, or its group failed to be written): only a database commit makes it durable.
    pub(crate) fn unjournaled(&self) -> bool {
        self.unjournaled
    }

    /// Drops the gathered writes (a database commit is making them durable instead).
    pub(crate) fn discard(&mut self) {
        self.buf.clear();
        self.unjournaled = false;
    }

    /// Appends the gathered writes as one group and returns its number (`None`: nothing was
    /// gathered). `applied` is the last group the database has: when that is every group and the
    /// file is past [`WRAP_BYTES`], the journal starts over at its beginning.
    /// The group is not appended (an error, as for a failed write) when it would leave less
    /// than [`RESERVE`] allocated past it and the disk has no room for more.
    pub(crate) fn seal(&mut self, applied: u64) -> StoreResult<Option<u64>> {
        self.seal_with(applied, true)
    }

    /// Appends `w` as a group of its own, into the reserve if the disk has no other room: a
    /// roll-back's deletion, durable whenever the rows it deletes may be. The writes gathered
    /// before it are left out of the journal (they are in the queue, and unacknowledged), so the
    /// next flush waits for a database commit ([`Self::unjournaled`]).
    pub(crate) fn seal_alone(&mut self, w: &Write, applied: u64) -> StoreResult<Option<u64>> {
        self.buf.clear();
        self.stage(w);
        let sealed = self.seal_with(applied, false);
        self.unjournaled = true;
        sealed
    }

    fn seal_with(&mut self, applied: u64, keep_reserve: bool) -> StoreResult<Option<u64>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        if self.offset >= WRAP_BYTES && applied + 1 >= self.next_seq {
            self.offset = 0;
        }
        if keep_reserve && let Err(e) = self.reserve(self.offset + self.buf.len() as u64) {
            self.buf.clear();
            self.unjournaled = true;
            return Err(io("keep room for deletions", &self.path, e));
        }
        let seq = self.next_seq;
        let len = (self.buf.len() - HEADER) as u32;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(&self.buf[HEADER..]);
        self.buf[..4].copy_from_slice(&MAGIC);
        self.buf[4..8].copy_from_slice(&len.to_le_bytes());
        self.buf[8..16].copy_from_slice(&seq.to_le_bytes());
        self.buf[16..20].copy_from_slice(&crc.finalize().to_le_bytes());
        let written = self.file.write_all_at(&self.buf, self.offset);
        let size = self.buf.len() as u64;
        self.buf.clear();
        if self.buf.capacity() > 1 << 20 {
            self.buf = Vec::new();
        }
        if let Err(e) = written {
            self.unjournaled = true;
            return Err(io("write", &self.path, e));
        }
        self.offset += size;
        self.next_seq += 1;
        Ok(Some(seq))
    }

    /// Allocates the file's blocks up to `end` and [`RESERVE`] bytes past it, without changing
    /// its length. A filesystem that cannot preallocate keeps no reserve (and says so once).
    fn reserve(&mut self, end: u64) -> std::io::Result<()> {
        let Some(allocated) = self.allocated else {
            return Ok(());
        };
        let want = end + RESERVE;
        if want <= allocated {
            return Ok(());
        }
        // SAFETY: fallocate on a descriptor this journal owns; no memory is involved.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                allocated as libc::off_t,
                (want - allocated) as libc::off_t,
            )
        };
        if r == 0 {
            self.allocated = Some(want);
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            tracing::warn!(journal = %self.path.display(), "this filesystem cannot preallocate: the journal keeps no room for deletions on a full disk");
            self.allocated = None;
            return Ok(());
        }
        Err(e)
    }

    /// Stages and seals `writes` as one group.
    #[cfg(test)]
    pub(crate) fn append(&mut self, writes: &[Write]) -> StoreResult<Option<u64>> {
        for w in writes {
            self.stage(w);
        }
        self.seal(0)
    }

    /// Empties the file (after a start-up replay, or when the store closes with everything
    /// applied), so that nothing older than the next record is left in it.
    pub(crate) fn clear(&mut self) -> StoreResult<()> {
        self.offset = 0;
        self.file.set_len(0).map_err(|e| io("truncate", &self.path, e))?;
        // (Truncating freed the reserve too; a filesystem that cannot preallocate stays so.)
        self.allocated = self.allocated.map(|_| 0);
        Ok(())
    }

    /// Moves the file aside (damaged: [`Aside::Failed`]; a group the database refuses:
    /// [`Aside::Refused`]) and starts an empty one.
    pub(crate) fn set_aside(&mut self, why: Aside) -> StoreResult<PathBuf> {
        let aside = self.path.with_extension(format!("journal.{}-{}", why.word(), super::now_ms()));
        std::fs::rename(&self.path, &aside).map_err(|e| io("rename", &self.path, e))?;
        self.file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.path)
            .map_err(|e| io("open", &self.path, e))?;
        lock(&self.file, &self.path)?;
        self.offset = 0;
        self.allocated = self.allocated.map(|_| 0);
        Ok(aside)
    }
}

/// Why a journal file was set aside, and the word its name carries (`simtree.journal.{word}-{ms}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aside {
    /// A damaged record (`data repair` applied the groups before it), or, before the fix of
    /// issue #42, any group that did not apply at start-up, a transient fault's included.
    Failed,
    /// The database refused a group (`data repair` applied the groups before it).
    Refused,
    /// Its groups were applied again by `data repair`; kept for inspection.
    Reapplied,
}

impl Aside {
    fn word(self) -> &'static str {
        match self {
            Aside::Failed => "failed",
            Aside::Refused => "refused",
            Aside::Reapplied => "reapplied",
        }
    }
}

/// A journal file set aside in a data folder: its path, why, and when (Unix ms, from its name).
#[derive(Debug, Clone)]
pub(crate) struct AsideFile {
    pub(crate) path: PathBuf,
    pub(crate) why: Aside,
    pub(crate) at_ms: u64,
}

impl AsideFile {
    /// The set-aside journals of the data folder `dir`, oldest first.
    pub(crate) fn list(dir: &Path) -> StoreResult<Vec<AsideFile>> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("list", dir, e)),
        };
        let mut files: Vec<AsideFile> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let rest = name.strip_prefix("simtree.journal.")?;
                let (word, ms) = rest.rsplit_once('-')?;
                let why = [Aside::Failed, Aside::Refused, Aside::Reapplied].into_iter().find(|a| a.word() == word)?;
                Some(AsideFile { path: e.path(), why, at_ms: ms.parse().ok()? })
            })
            .collect();
        files.sort_by_key(|f| f.at_ms);
        Ok(files)
    }

    /// The intact groups of the file after group `applied` (read only; the file is not locked).
    pub(crate) fn groups(&self, applied: u64) -> StoreResult<Vec<Group>> {
        let bytes = std::fs::read(&self.path).map_err(|e| io("read", &self.path, e))?;
        Ok(scan(&bytes, applied).0)
    }

    /// Renames the file to say why it is kept now.
    pub(crate) fn rename(&self, why: Aside) -> StoreResult<PathBuf> {
        let to = self.path.with_file_name(format!("simtree.journal.{}-{}", why.word(), super::now_ms()));
        std::fs::rename(&self.path, &to).map_err(|e| io("rename", &self.path, e))?;
        Ok(to)
    }
}

/// The groups after `applied`, consecutive from `applied + 1`, the highest number read, and
/// damage: bytes that are no whole record (or fail its checksum) followed by a group the
/// replay needed. Bad bytes at the end are a torn append (the process died in it, before it was
/// acknowledged) and end the replay; bad bytes followed only by groups the database has (an
/// older lap, a damaged applied group) are skipped.
fn scan(bytes: &[u8], applied: u64) -> (Vec<Group>, u64, Option<String>) {
    let mut pending = Vec::new();
    let mut last = 0;
    let mut at = 0;
    // Where bad bytes were skipped, if they were.
    let mut skipped: Option<usize> = None;
    while at < bytes.len() {
        let Some((seq, payload)) = record(bytes, at) else {
            match next_record(bytes, at + 1) {
                Some(next) => {
                    skipped.get_or_insert(at);
                    at = next;
                    continue;
                }
                None => {
                    // A whole record at the end that fails its checksum, of a group the
                    // replay needs, was written whole (a torn append is cut short) and may have
                    // been acknowledged: damage, not a torn append.
                    let expected = applied + 1 + pending.len() as u64;
                    if let Some(seq) = whole_but_damaged(bytes, at)
                        && seq >= expected
                    {
                        let damage = format!("the record at byte {at} (group {seq}, the last) fails its checksum");
                        return (pending, last, Some(damage));
                    }
                    break;
                }
            }
        };
        let here = at;
        at += HEADER + payload.len();
        last = last.max(seq);
        let expected = applied + 1 + pending.len() as u64;
        if seq < expected {
            continue;
        }
        if seq > expected {
            if let Some(bad) = skipped {
                let damage = format!(
                    "the record at byte {bad} is damaged, and group {seq} (at byte {here}) follows it where group {expected} was due"
                );
                return (pending, last, Some(damage));
            }
            break;
        }
        match decode_all(payload) {
            Ok(writes) => pending.push((seq, writes)),
            Err(e) => {
                let damage = format!("group {seq} passed its checksum but does not decode: {e}");
                return (pending, last, Some(damage));
            }
        }
    }
    (pending, last, None)
}

/// The offset of the first whole record from byte `from` on.
fn next_record(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = bytes.get(at..)?.windows(4).position(|w| w == MAGIC) {
        at += i;
        if record(bytes, at).is_some() {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// The group number of a record at `at` that is all there (its header's magic, and as many
/// bytes as its length says) yet fails its checksum.
fn whole_but_damaged(bytes: &[u8], at: usize) -> Option<u64> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes(header[4..8].try_into().ok()?) as usize;
    let complete = header[..4] == MAGIC && bytes.len() >= (at + HEADER).checked_add(len)?;
    complete.then(|| u64::from_le_bytes(header[8..16].try_into().unwrap_or_default()))
}

/// The record at `at`, if a whole, undamaged one is there.
fn record(bytes: &[u8], at: usize) -> Option<(u64, &[u8])> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    if header[..4] != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(header[4..8].try_into().ok()?) as usize;
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let crc = u32::from_le_bytes(header[16..20].try_into().ok()?);
    let payload = bytes.get(at + HEADER..(at + HEADER).checked_add(len)?)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    (h.finalize() == crc).then_some((seq, payload))
}

// ---- the writes' binary form ----

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => {
            out.push(1);
            put_u64(out, v);
        }
        None => out.push(0),
    }
}

fn put_opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(s) => {
            out.push(1);
            put_bytes(out, s.as_bytes());
        }
        None => out.push(0),
    }
}

/// Enums and lists of records in their JSON form, as the database holds them.
fn put_json<T: serde::Serialize>(out: &mut Vec<u8>, v: &T) {
    put_bytes(out, &serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec()));
}

/// One field of a write in the journal: a `u64` as 8 little-endian bytes, text as its length
/// then its UTF-8, an option as a flag byte (0 none, 1 some) then the value, an `f64` as its
/// bits.
trait Field: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn get(r: &mut Reader<'_>) -> StoreResult<Self>;
}

impl Field for u64 {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, *self);
    }
    fn get(r: &mut Reader<'_>) -> StoreResult<u64> {
        r.u64()
    }
}

impl Field for f64 {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.to_bits());
    }
    fn get(r: &mut Reader<'_>) -> StoreResult<f64> {
        r.u64().map(f64::from_bits)
    }
}

impl Field for String {
    fn put(&self, out: &mut Vec<u8>) {
        put_bytes(out, self.as_bytes());
    }
    fn get(r: &mut Reader<'_>) -> StoreResult<String> {
        r.string()
    }
}

impl Field for Option<u64> {
    fn put(&self, out: &mut Vec<u8>) {
        put_opt_u64(out, *self);
    }
    fn get(r: &mut Reader<'_>) -> StoreResult<Option<u64>> {
        r.opt_u64()
    }
}

impl Field for Option<String> {
    fn put(&self, out: &mut Vec<u8>) {
        put_opt_str(out, self.as_deref());
    }
    fn get(r: &mut Reader<'_>) -> StoreResult<Option<String>> {
        r.opt_string()
    }
}

/// The kinds of write whose fields are all [`Field`]s, each with its tag and its fields in the
/// order they are written: one line makes both the encoder's and the decoder's arm. A new kind
/// is a new line (tags are never reused); the compiler refuses a line that leaves a field out.
macro_rules! field_writes {
    ($($tag:literal => $kind:ident { $($field:ident),* $(,)? }),* $(,)?) => {
        /// Writes `w` if it is one of these kinds; `false` when it is not.
        fn encode_fields(out: &mut Vec<u8>, w: &Write) -> bool {
            match w {
                $(Write::$kind { $($field),* } => {
                    out.push($tag);
                    $(Field::put($field, out);)*
                })*
                _ => return false,
            }
            true
        }

        /// Reads a write of kind `tag` if it is one of these kinds; `None` when it is not.
        fn decode_fields(tag: u8, r: &mut Reader<'_>) -> Option<StoreResult<Write>> {
            match tag {
                $($tag => Some((|| Ok(Write::$kind { $($field: Field::get(r)?),* }))()),)*
                _ => None,
            }
        }
    };
}

field_writes! {
    1 => Rename { tree, name },
    2 => Touch { tree, last_activity, seq, nodes },
    4 => Log { tree, node, index, count, entries },
    7 => Sweep { tree, id, body },
    8 => DeleteSweep { tree, id },
    9 => DeleteTree { tree },
    10 => Applied { seq },
    11 => ImportBegin { tree },
    12 => ImportEnd { tree },
    13 => Document { tree, body },
    14 => Dataset { name, body },
    15 => DeleteDataset { name },
    16 => SaveScenario { id, version, saved, body },
    17 => DeleteScenario { id },
    18 => Origin { tree, scenario, version },
    // 20–23: the notebook's (annotations, descriptions, search texts, asks).
    20 => Annotate { tree, node, body },
    21 => Describe { tree, description },
    22 => Text { tree, node, kind, ord, body },
    23 => Ask { tree, node, seq, body },
    // 28–30: explorations and a tree's money cap.
    28 => Explore { tree, id, body },
    29 => DeleteExplore { tree, id },
    30 => TreeMoney { tree, money },
}

/// Appends `w` in its binary form: its tag, then its fields.
fn encode(out: &mut Vec<u8>, w: &Write) {
    if encode_fields(out, w) {
        return;
    }
    match w {
        Write::Tree(t) => {
            out.push(0);
            put_u64(out, t.id);
            put_bytes(out, t.name.as_bytes());
            put_bytes(out, t.scenario.as_bytes());
            put_json(out, &t.kind);
            for v in [t.created, t.last_activity, t.seq, t.nodes] {
                put_u64(out, v);
            }
            put_opt_u64(out, t.budget);
        }
        Write::Node { tree, row } => {
            out.push(3);
            put_u64(out, *tree);
            put_u64(out, row.id);
            put_opt_u64(out, row.parent);
            put_u64(out, u64::from(row.depth));
            put_json(out, &row.edge_type);
            put_json(out, &row.ops);
            put_json(out, &row.status);
            put_opt_str(out, row.error.as_deref());
            put_u64(out, row.created);
            put_opt_u64(out, row.finished);
            put_u64(out, row.turns);
            put_json(out, &row.records);
        }
        Write::State { tree, node, data, chunks } => {
            out.push(5);
            put_u64(out, *tree);
            put_u64(out, *node);
            put_bytes(out, data);
            put_u64(out, chunks.len() as u64);
            for ((owner, ord), bytes) in chunks {
                put_u64(out, *owner);
                put_u64(out, u64::from(*ord));
                put_bytes(out, bytes);
            }
        }
        Write::DeleteNodes { tree, nodes } => {
            out.push(6);
            put_u64(out, *tree);
            put_u64(out, nodes.len() as u64);
            for n in nodes {
                put_u64(out, *n);
            }
        }
        // Jobs are PostgreSQL's (`serve --jobs`), never made on SQLite: nothing to journal.
        Write::Job { .. } => {}
        other => unreachable!("{other:?} has its arm in field_writes!"),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn damaged(what: &str) -> StoreError {
    StoreError::Corrupt(format!("journal record: {what}"))
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> StoreResult<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or_else(|| damaged("a length overflows"))?;
        let b = self.bytes.get(self.at..end).ok_or_else(|| damaged("cut short"))?;
        self.at = end;
        Ok(b)
    }

    fn byte(&mut self) -> StoreResult<u8> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> StoreResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| damaged("cut short"))?))
    }

    fn bytes(&mut self) -> StoreResult<&'a [u8]> {
        let n = usize::try_from(self.u64()?).map_err(|_| damaged("a length overflows"))?;
        self.take(n)
    }

    fn string(&mut self) -> StoreResult<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| damaged("text is not UTF-8"))
    }

    fn opt_u64(&mut self) -> StoreResult<Option<u64>> {
        match self.byte()? {
            0 => Ok(None),
            1 => self.u64().map(Some),
            _ => Err(damaged("a bad option flag")),
        }
    }

    fn opt_string(&mut self) -> StoreResult<Option<String>> {
        match self.byte()? {
            0 => Ok(None),
            1 => self.string().map(Some),
            _ => Err(damaged("a bad option flag")),
        }
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> StoreResult<T> {
        serde_json::from_slice(self.bytes()?).map_err(|e| damaged(&e.to_string()))
    }

    /// A count of items at least `min_item` bytes each: no larger than what is left could hold.
    fn count(&mut self, min_item: usize) -> StoreResult<usize> {
        let n = usize::try_from(self.u64()?).map_err(|_| damaged("a count overflows"))?;
        if n.saturating_mul(min_item) > self.bytes.len() - self.at {
            return Err(damaged("a count larger than the record"));
        }
        Ok(n)
    }

    fn write(&mut self) -> StoreResult<Write> {
        let tag = self.byte()?;
        if let Some(w) = decode_fields(tag, self) {
            return w;
        }
        Ok(match tag {
            0 => Write::Tree(TreeRow {
                id: self.u64()?,
                name: self.string()?,
                scenario: self.string()?,
                kind: self.json()?,
                created: self.u64()?,
                last_activity: self.u64()?,
                seq: self.u64()?,
                nodes: self.u64()?,
                budget: self.opt_u64()?,
                description: None,
            }),
            3 => Write::Node {
                tree: self.u64()?,
                row: NodeRow {
                    id: self.u64()?,
                    parent: self.opt_u64()?,
                    depth: u32::try_from(self.u64()?).map_err(|_| damaged("a depth overflows"))?,
                    edge_type: self.json()?,
                    ops: self.json()?,
                    status: self.json()?,
                    error: self.opt_string()?,
                    created: self.u64()?,
                    finished: self.opt_u64()?,
                    turns: self.u64()?,
                    records: self.json()?,
                },
            },
            5 => {
                let tree = self.u64()?;
                let node = self.u64()?;
                let data = self.bytes()?.to_vec();
                let n = self.count(24)?;
                let mut chunks = Vec::with_capacity(n);
                for _ in 0..n {
                    let owner = self.u64()?;
                    let ord = u32::try_from(self.u64()?).map_err(|_| damaged("a chunk number overflows"))?;
                    chunks.push(((owner, ord), self.bytes()?.to_vec()));
                }
                Write::State { tree, node, data, chunks }
            }
            6 => {
                let tree = self.u64()?;
                let n = self.count(8)?;
                let nodes = (0..n).map(|_| self.u64()).collect::<StoreResult<_>>()?;
                Write::DeleteNodes { tree, nodes }
            }
            t => return Err(damaged(&format!("unknown write type {t}"))),
        })
    }
}

fn decode_all(payload: &[u8]) -> StoreResult<Vec<Write>> {
    let mut r = Reader { bytes: payload, at: 0 };
    let mut writes = Vec::new();
    while r.at < payload.len() {
        writes.push(r.write()?);
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use simtree_shared::{EdgeType, NodeStatus, Op, SimKind};

    use super::*;

    fn every_write() -> Vec<Write> {
        vec![
            Write::Tree(TreeRow {
                id: 3,
                name: "a tree — ünïcode".into(),
                scenario: "simple_chat".into(),
                kind: SimKind::Social,
                created: 1,
                last_activity: 2,
                seq: 9,
                nodes: 4,
                budget: Some(1000),
                description: None,
            }),
            Write::Rename { tree: 3, name: String::new() },
            Write::Touch { tree: 3, last_activity: 5, seq: 10, nodes: 5 },
            Write::Node {
                tree: 3,
                row: NodeRow {
                    id: 9,
                    parent: Some(2),
                    depth: 2,
                    edge_type: EdgeType::PublicEvent,
                    ops: vec![Op::PublicBroadcast { text: "news".into() }],
                    status: NodeStatus::Failed,
                    error: Some("boom".into()),
                    created: 7,
                    finished: None,
                    turns: 1,
                    records: Vec::new(),
                },
            },
            Write::Log { tree: 3, node: 9, index: 4, count: 2, entries: "{\"a\":1}\n{\"b\":2}".into() },
            Write::State {
                tree: 3,
                node: 9,
                data: vec![6, 0, 1, 2],
                chunks: vec![((9, 0), vec![1; 40]), ((9, 1), Vec::new())],
            },
            Write::DeleteNodes { tree: 3, nodes: vec![4, 5, 6] },
            Write::ImportBegin { tree: 4 },
            Write::ImportEnd { tree: 4 },
            Write::Sweep { tree: 3, id: 1, body: "{}".into() },
            Write::DeleteSweep { tree: 3, id: 1 },
            Write::Explore { tree: 3, id: 2, body: "{\"x\":1}".into() },
            Write::DeleteExplore { tree: 3, id: 2 },
            Write::TreeMoney { tree: 3, money: 0.125 },
            Write::DeleteTree { tree: 8 },
            Write::Applied { seq: 12 },
            Write::Document { tree: 3, body: "{\"scene\":{}}".into() },
            Write::Dataset { name: "prices".into(), body: "date,ticker\n".into() },
            Write::DeleteDataset { name: "prices".into() },
            Write::SaveScenario {
                id: "council-2".into(),
                version: 3,
                saved: 1_700_000_000_000,
                body: "{\"title\":\"Ünïcode\"}".into(),
            },
            Write::DeleteScenario { id: "council-2".into() },
            Write::Origin { tree: 3, scenario: "council-2".into(), version: 2 },
            Write::Annotate { tree: 3, node: 9, body: Some("{\"title\":\"t\"}".into()) },
            Write::Annotate { tree: 3, node: 9, body: None },
            Write::Describe { tree: 3, description: Some("about — ü".into()) },
            Write::Describe { tree: 3, description: None },
            Write::Text { tree: 3, node: 9, kind: "memory".into(), ord: 2, body: "Ann: hello".into() },
            Write::Ask { tree: 3, node: 9, seq: 0, body: "{}".into() },
        ]
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("simtree-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("simtree.journal")
    }

    fn dump(groups: &[Group]) -> Vec<(u64, String)> {
        groups.iter().map(|(s, w)| (*s, format!("{w:?}"))).collect()
    }

    #[test]
    fn every_write_comes_back_as_written_and_replay_starts_after_the_applied_group() {
        let path = temp("roundtrip");
        let (mut j, pending) = Journal::open(&path, 0).unwrap();
        assert!(pending.is_empty());
        let all = every_write();
        for w in &all {
            j.append(std::slice::from_ref(w)).unwrap().unwrap();
        }
        drop(j);
        let (_, pending) = Journal::open(&path, 0).unwrap();
        let want: Vec<(u64, String)> =
            all.iter().enumerate().map(|(i, w)| (i as u64 + 1, format!("{:?}", [w]))).collect();
        assert_eq!(dump(&pending), want);
        let (mut j, pending) = Journal::open(&path, 9).unwrap();
        let n = all.len() as u64;
        assert_eq!(pending.iter().map(|p| p.0).collect::<Vec<_>>(), (10..=n).collect::<Vec<_>>());
        // Numbering goes on after the highest number in the file.
        assert_eq!(j.append(&[Write::DeleteTree { tree: 1 }]).unwrap(), Some(n + 1));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// The journal's bytes of one sample of every kind of write, one hex line each, as the
    /// journal has always written them (`server/tests/fixtures/journal/every_write.hex`).
    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/journal/every_write.hex");

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(line: &str) -> Vec<u8> {
        (0..line.len()).step_by(2).map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap()).collect()
    }

    /// Each sample write encodes to the bytes recorded for it, and each recorded line reads back
    /// as a sample and encodes to itself: the format of a kind never changes. A new kind's sample
    /// is recorded with `UPDATE_SNAPSHOTS=1` (lines are only ever added).
    #[test]
    fn every_kind_of_write_keeps_its_bytes() {
        let samples: Vec<(String, String)> = every_write()
            .iter()
            .map(|w| {
                let mut out = Vec::new();
                encode(&mut out, w);
                (hex(&out), format!("{w:?}"))
            })
            .collect();
        let mut golden: Vec<String> =
            std::fs::read_to_string(GOLDEN).unwrap_or_default().lines().map(str::to_string).collect();
        let new: Vec<&(String, String)> = samples.iter().filter(|(h, _)| !golden.contains(h)).collect();
        if !new.is_empty() && std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            golden.extend(new.iter().map(|(h, _)| h.clone()));
            std::fs::create_dir_all(Path::new(GOLDEN).parent().unwrap()).unwrap();
            std::fs::write(GOLDEN, golden.join("\n") + "\n").unwrap();
        } else {
            let new: Vec<&str> = new.iter().map(|(_, w)| w.as_str()).collect();
            assert!(
                new.is_empty(),
                "not in {GOLDEN} (a changed format, or a new kind: record it with UPDATE_SNAPSHOTS=1): {new:?}"
            );
        }
        for line in &golden {
            let bytes = unhex(line);
            let writes = decode_all(&bytes).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(writes.len(), 1, "{line}");
            let mut again = Vec::new();
            encode(&mut again, &writes[0]);
            assert_eq!(&hex(&again), line, "{:?} no longer encodes as recorded", writes[0]);
            let w = format!("{:?}", writes[0]);
            assert!(samples.iter().any(|(h, d)| h == line && *d == w), "{w} is no sample any more");
        }
    }

    #[test]
    fn a_torn_or_damaged_record_ends_the_replay_and_a_gap_stops_it() {
        let path = temp("damage");
        let (mut j, _) = Journal::open(&path, 0).unwrap();
        for t in 0..4 {
            j.append(&[Write::DeleteTree { tree: t }]).unwrap();
        }
        drop(j);
        let whole = std::fs::read(&path).unwrap();
        let record = whole.len() / 4;
        // Torn: the last record cut short.
        std::fs::write(&path, &whole[..whole.len() - 3]).unwrap();
        assert_eq!(Journal::open(&path, 0).unwrap().1.len(), 3);
        // Damaged: a flipped bit in the second record's payload, with groups after it. Start-up
        // stops (it used to drop the groups after it) and says what to run; a repair gets the
        // group before it.
        let mut bad = whole.clone();
        bad[record + HEADER + 1] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let e = Journal::open(&path, 0).err().expect("refused");
        assert!(
            e.message().contains(&format!("the record at byte {} is damaged, and group 3", record))
                && e.message().contains("simtree data check")
                && e.message().contains("simtree data repair"),
            "{e}"
        );
        let (_, pending, damage) = Journal::open_damaged(&path, 0).unwrap();
        assert_eq!((pending.len(), damage.is_some()), (1, true));
        // Damage in a group the database already has is no loss.
        assert_eq!(Journal::open(&path, 3).unwrap().1.len(), 1);
        // A flipped bit in the last record, whole: damage too (it was written whole, so it may
        // have been acknowledged), not a torn append; no loss once the database has it.
        let mut bad = whole.clone();
        bad[3 * record + HEADER + 1] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let e = Journal::open(&path, 0).err().expect("refused");
        assert!(
            e.message().contains(&format!("the record at byte {} (group 4, the last) fails its checksum", 3 * record))
                && e.message().contains("simtree data repair"),
            "{e}"
        );
        assert_eq!(Journal::open_damaged(&path, 0).unwrap().1.len(), 3);
        assert!(Journal::open(&path, 4).unwrap().1.is_empty());
        // A gap after the applied number (the database lost groups the journal has): nothing.
        std::fs::write(&path, &whole[record..]).unwrap();
        assert!(Journal::open(&path, 0).unwrap().1.is_empty());
        // Garbage: nothing, and no panic.
        std::fs::write(&path, b"STJ1\xff\xff\xff\xff garbage").unwrap();
        assert!(Journal::open(&path, 0).unwrap().1.is_empty());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_wrapped_journal_replays_only_its_newest_lap() {
        let path = temp("wrap");
        let (mut j, _) = Journal::open(&path, 0).unwrap();
        let big = |t| Write::Sweep { tree: t, id: 0, body: "x".repeat(1 << 20) };
        for t in 0..5 {
            j.append(&[big(t)]).unwrap();
        }
        // Not while the database lacks a group; then at once.
        j.stage(&Write::DeleteTree { tree: 76 });
        assert_eq!(j.seal(4).unwrap(), Some(6));
        assert!(j.offset > WRAP_BYTES);
        j.stage(&Write::DeleteTree { tree: 77 });
        assert_eq!(j.seal(6).unwrap(), Some(7));
        assert!(j.offset < 100, "past the wrap size, an applied journal starts over");
        drop(j);
        // Groups 1–6 applied; group 7 overwrote the start of group 1, then stale records follow.
        let (_, pending) = Journal::open(&path, 6).unwrap();
        assert_eq!(dump(&pending), [(7, format!("{:?}", [Write::DeleteTree { tree: 77 }]))]);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_second_opener_of_the_same_journal_is_refused_until_the_first_closes() {
        let path = temp("lock");
        let (first, _) = Journal::open(&path, 0).unwrap();
        let e = Journal::open(&path, 0).err().expect("refused");
        assert!(e.message().contains("in use by another simtree server"), "{e}");
        drop(first);
        Journal::open(&path, 0).unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn hostile_counts_and_lengths_are_refused_without_allocating() {
        let mut payload = vec![6];
        put_u64(&mut payload, 1);
        put_u64(&mut payload, u64::MAX);
        assert!(decode_all(&payload).is_err());
        let mut payload = vec![1];
        put_u64(&mut payload, 1);
        put_u64(&mut payload, u64::MAX - 3);
        assert!(decode_all(&payload).is_err());
        assert!(decode_all(&[42]).is_err());
    }
}
