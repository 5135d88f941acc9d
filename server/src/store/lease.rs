//! The server lease: one writer of trees per PostgreSQL database (issue 26). Two servers each
//! keeping trees in memory and writing them back would overwrite each other's writes; ids alone
//! coming from the database (see [`super::Database::take_tree_id`]) do not make that safe. The
//! holder — the leading server — is the one writer; every other `serve` on the database follows
//! it (`http/fleet.rs`), forwarding requests to the address the row names.
//!
//! The lease is one row (`lease`, name `server`): holder id, host, pid, when it was acquired and
//! when it expires, in Unix milliseconds of the *database's* clock, so servers on hosts whose
//! clocks disagree still agree on expiry, and the holder's advertised address. A server takes it
//! at start-up or, following, once it lapses (while another holds an unexpired lease, [`take`]
//! answers who does), renews it from the store thread every sixth of its length, and deletes it
//! when it closes. Every write transaction renews it first, holding its row lock until the
//! commit: a holder that lost the lease (it could not renew while the database was away and
//! another server took it over) has its commits refused, so it can never write beside the new
//! holder. Such a server stops taking writes (503 and `/ready` not ready, naming the new holder)
//! and must be restarted; it never takes the lease back by itself, since its memory may be stale.
//!
//! SQLite does not use it: its data folder is locked by the commit journal (`flock`).

use std::time::Duration;

use super::vocab::{Cell, P, Sql};
use super::{StoreError, StoreResult};

/// The default length of a lease (`--lease-secs`).
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Who this process is, and how long its lease lasts.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Unique per process start: host, pid and start time.
    pub holder: String,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) length: Duration,
    /// The base URL other servers reach this one at (`serve --advertise`), written into the
    /// lease row when it is taken: followers forward their requests there.
    pub(crate) address: Option<String>,
}

impl Lease {
    /// This process's lease of `length`.
    pub fn this_process(length: Duration) -> Lease {
        let host = hostname();
        let pid = std::process::id();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Lease {
            holder: format!("{host}/{pid}/{nanos:x}"),
            host,
            pid,
            length: length.max(Duration::from_secs(1)),
            address: None,
        }
    }

    /// How often the lease is renewed: a sixth of its length (5 s for 30 s), so that a few
    /// renewals may fail (a slow database, a busy machine) before it lapses.
    pub(crate) fn heartbeat(&self) -> Duration {
        self.length / 6
    }

    fn length_ms(&self) -> i64 {
        self.length.as_millis() as i64
    }
}

/// The holder of a lease, as its row says.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub(crate) holder: String,
    pub(crate) host: String,
    pub(crate) pid: u64,
    acquired: u64,
    expires: u64,
    /// The database's clock when the row was read.
    now: u64,
    /// Where the holder serves (`serve --advertise`); `None` from servers before it was
    /// written, and from stores that lead without serving.
    pub(crate) address: Option<String>,
}

impl Holder {
    /// "host H, pid P, since <UTC> (N s ago)".
    pub(crate) fn describe(&self) -> String {
        format!(
            "host {}, pid {}, since {} ({} ago)",
            self.host,
            self.pid,
            simtree_shared::time::utc_seconds(self.acquired),
            seconds(self.now.saturating_sub(self.acquired))
        )
    }

    /// "host H, pid P, since <UTC> (N s ago), at URL": [`Self::describe`] and the address.
    pub(crate) fn describe_at(&self) -> String {
        match &self.address {
            Some(a) => format!("{}, at {a}", self.describe()),
            None => format!("{}, at no advertised address", self.describe()),
        }
    }

    /// Milliseconds until the lease lapses unless renewed.
    /// Whether this holder is an earlier server at `me`'s own address on `me`'s host whose
    /// process is gone (killed, crashed): `me` bound that address, so it cannot be serving
    /// there, and its lease need not be waited out.
    pub(crate) fn is_gone_predecessor_of(&self, me: &Lease) -> bool {
        self.holder != me.holder
            && self.host == me.host
            && self.address.is_some()
            && self.address == me.address
            // The same pid is this process itself now (a container's pid 1 restarted).
            && (self.pid == u64::from(me.pid) || !std::path::Path::new(&format!("/proc/{}", self.pid)).exists())
    }

    pub(crate) fn left_ms(&self) -> u64 {
        self.expires.saturating_sub(self.now)
    }

    /// Whether the lease has lapsed (its holder stopped renewing it): anyone may take it.
    pub(crate) fn lapsed(&self) -> bool {
        self.left_ms() == 0
    }
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The message of a store that must hold the lease to write (a command run on a database a
/// server leads) while another process holds it.
pub(crate) fn refusal(other: &Holder) -> StoreError {
    StoreError::LeaseLost(format!(
        "this PostgreSQL database is already served by another simtree ({}). Only the process holding its \
         lease writes trees: another writer would overwrite them. Make the change through that server, stop it \
         (it releases the database at once), or, if it died, try again once its lease lapses, in {} (leases \
         last --lease-secs, default {} s, and are renewed every sixth of that)",
        other.describe_at(),
        seconds(other.left_ms()),
        DEFAULT_LEASE.as_secs()
    ))
}

/// The database's clock in Unix milliseconds, as SQL.
fn now<S: Sql>(sql: &S) -> &'static str {
    sql.now_ms_sql()
}

/// Takes the lease if it is free, lapsed or already ours; otherwise returns who holds it.
pub(crate) fn take<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<Result<(), Holder>> {
    let now = now(sql);
    let taken = sql.execute(
        &format!(
            "INSERT INTO lease (name, holder, host, pid, acquired, expires, address)
                VALUES ('server', $1, $2, $3, {now}, {now} + $4, $5)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, host = excluded.host, pid = excluded.pid,
                acquired = excluded.acquired, expires = excluded.expires, address = excluded.address
             WHERE lease.expires <= excluded.acquired OR lease.holder = excluded.holder"
        ),
        &[P::Text(&me.holder), P::Text(&me.host), P::Int(i64::from(me.pid)), P::Int(me.length_ms()), address(me)],
    )?;
    if taken == 1 {
        return Ok(Ok(()));
    }
    match holder(sql)? {
        Some(h) if h.is_gone_predecessor_of(me) => {
            // Only if the row still names it: two starting servers cannot both take it.
            let stolen = sql.execute(
                &format!(
                    "UPDATE lease SET holder = $1, host = $2, pid = $3, acquired = {now}, expires = {now} + $4,
                        address = $5 WHERE name = 'server' AND holder = $6"
                ),
                &[
                    P::Text(&me.holder),
                    P::Text(&me.host),
                    P::Int(i64::from(me.pid)),
                    P::Int(me.length_ms()),
                    address(me),
                    P::Text(&h.holder),
                ],
            )?;
            if stolen == 1 {
                tracing::warn!(
                    "the server that held this database's lease at this address ({}) is gone: this server takes \
                     the lease over without waiting for it to lapse",
                    h.describe()
                );
                return Ok(Ok(()));
            }
            Ok(Err(holder(sql)?.unwrap_or(h)))
        }
        Some(h) => Ok(Err(h)),
        // Released between the two statements: try once more.
        None => Ok(
            match sql.execute(
                &format!(
                    "INSERT INTO lease (name, holder, host, pid, acquired, expires, address)
                    VALUES ('server', $1, $2, $3, {now}, {now} + $4, $5)
                 ON CONFLICT (name) DO NOTHING"
                ),
                &[
                    P::Text(&me.holder),
                    P::Text(&me.host),
                    P::Int(i64::from(me.pid)),
                    P::Int(me.length_ms()),
                    address(me),
                ],
            )? {
                1 => Ok(()),
                _ => Err(holder(sql)?.ok_or_else(|| StoreError::Io("the server lease changes hands too fast".into()))?),
            },
        ),
    }
}

fn address(me: &Lease) -> P<'_> {
    P::OptText(me.address.as_deref())
}

/// Extends our lease; false when it is no longer ours (another server took it over after it
/// lapsed). Inside a write transaction this also locks the row until the commit.
pub(crate) fn renew<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<bool> {
    let now = now(sql);
    let n = sql.execute(
        // (Parameters numbered in the order they appear: SQLite numbers `$n` by appearance.)
        &format!("UPDATE lease SET expires = {now} + $1 WHERE name = 'server' AND holder = $2"),
        &[P::Int(me.length_ms()), P::Text(&me.holder)],
    )?;
    Ok(n == 1)
}

/// Queues, first in a write transaction, a statement that renews our lease and fails the
/// transaction when it is not ours any more; the lease's row stays locked until the commit, so
/// no other process can take it over in between (PostgreSQL: a writable CTE).
pub(crate) fn fence<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<()> {
    let now = now(sql);
    // Dividing by the number of rows renewed: an error (division by zero) when none was, found
    // as such by the caller after the commit fails.
    sql.write(
        &format!(
            "WITH renewed AS (UPDATE lease SET expires = {now} + $1 WHERE name = 'server' AND holder = $2 RETURNING 1)
             SELECT 1 / (SELECT COUNT(*)::INT FROM renewed)"
        ),
        &[P::Int(me.length_ms()), P::Text(&me.holder)],
    )
}

/// Gives the lease up (a graceful shutdown): another server may start at once.
pub(crate) fn release<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<()> {
    sql.execute("DELETE FROM lease WHERE name = 'server' AND holder = $1", &[P::Text(&me.holder)]).map(drop)
}

/// Who holds the lease now, if anyone.
pub(crate) fn holder<S: Sql>(sql: &mut S) -> StoreResult<Option<Holder>> {
    let now = now(sql);
    let rows = sql.query(
        &format!("SELECT holder, host, pid, acquired, expires, {now}, address FROM lease WHERE name = 'server'"),
        &[],
    )?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    let mut r = row.into_iter();
    let mut next = || r.next().unwrap_or(Cell::Null);
    let text = |c: Cell| match c {
        Cell::Text(t) => t,
        other => format!("{other:?}"),
    };
    let int = |c: Cell| match c {
        Cell::Int(i) => i.max(0) as u64,
        _ => 0,
    };
    Ok(Some(Holder {
        holder: text(next()),
        host: text(next()),
        pid: int(next()),
        acquired: int(next()),
        expires: int(next()),
        now: int(next()),
        address: match next() {
            Cell::Text(t) => Some(t),
            _ => None,
        },
    }))
}

/// The message of a server that lost its lease.
pub(crate) fn lost(by: Option<&Holder>) -> String {
    match by {
        Some(h) => format!(
            "this server lost the database's server lease to another simtree ({}) while it could not renew it; \
             it takes no more writes: stop the other server or this one, and restart this one",
            h.describe()
        ),
        None => "this server lost the database's server lease (it lapsed and was taken or released by another \
                 process); it takes no more writes: restart it"
            .into(),
    }
}

/// This machine's name (`/proc/sys/kernel/hostname`, `$HOSTNAME`, else "unknown").
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sql::Db;
    use crate::store::sqlite::Sqlite;
    use crate::testing::Scratch;

    fn open(dir: &std::path::Path) -> Db<Sqlite> {
        let mut db = Db::new(Sqlite::open(&dir.join("simtree.db")).unwrap());
        db.migrate().unwrap();
        db
    }

    /// The lease's rules on SQLite's engine (same statements; the servers' test is on PostgreSQL,
    /// tests/tests/teams.rs): taken when free or lapsed, refused while held, renewed only by its
    /// holder, released at once.
    #[test]
    fn a_lease_is_refused_while_held_renewed_by_its_holder_only_and_taken_once_lapsed() {
        let dir = Scratch::new("lease");
        let (mut a, mut b) = (open(&dir), open(&dir));
        let mut first = Lease::this_process(Duration::from_secs(1));
        first.holder.push_str("-a");
        let mut second = Lease::this_process(Duration::from_secs(1));
        second.holder.push_str("-b");
        assert_eq!(take(&mut a.sql, &first).unwrap(), Ok(()));
        assert_eq!(take(&mut a.sql, &first).unwrap(), Ok(()), "taken again by its holder");
        let refused = take(&mut b.sql, &second).unwrap().unwrap_err();
        assert_eq!(refused.holder, first.holder);
        assert!(refused.left_ms() > 0 && refused.left_ms() <= 1000, "{refused:?}");
        let message = refusal(&refused).message().to_string();
        assert!(message.contains(&format!("pid {}", first.pid)), "{message}");
        assert!(renew(&mut a.sql, &first).unwrap());
        assert!(!renew(&mut b.sql, &second).unwrap(), "not the holder");
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(take(&mut b.sql, &second).unwrap(), Ok(()), "lapsed: taken over");
        assert!(!renew(&mut a.sql, &first).unwrap(), "the first holder lost it");
        release(&mut a.sql, &first).unwrap();
        assert_eq!(holder(&mut a.sql).unwrap().unwrap().holder, second.holder, "not its to release");
        release(&mut b.sql, &second).unwrap();
        assert_eq!(holder(&mut a.sql).unwrap(), None);
        assert_eq!(take(&mut a.sql, &first).unwrap(), Ok(()), "released: free at once");
        drop((a, b));
    }

    /// The holder's advertised address is written with the lease and read back with it; a
    /// takeover replaces it, and a lease taken without one reads as none.
    #[test]
    fn the_lease_row_names_where_its_holder_serves() {
        let dir = Scratch::new("lease-address");
        let mut db = open(&dir);
        let mut first = Lease::this_process(Duration::from_secs(1));
        first.address = Some("http://10.0.0.5:8090".into());
        assert_eq!(take(&mut db.sql, &first).unwrap(), Ok(()));
        let h = holder(&mut db.sql).unwrap().unwrap();
        assert_eq!(h.address.as_deref(), Some("http://10.0.0.5:8090"));
        assert!(h.describe_at().ends_with(", at http://10.0.0.5:8090"), "{}", h.describe_at());
        assert!(!h.lapsed());
        std::thread::sleep(Duration::from_millis(1100));
        assert!(holder(&mut db.sql).unwrap().unwrap().lapsed());
        let mut second = Lease::this_process(Duration::from_secs(1));
        second.holder.push_str("-b");
        assert_eq!(take(&mut db.sql, &second).unwrap(), Ok(()), "lapsed: taken over");
        let h = holder(&mut db.sql).unwrap().unwrap();
        assert_eq!((h.holder.as_str(), h.address), (second.holder.as_str(), None));
        drop(db);
    }
}
