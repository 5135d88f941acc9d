//! Following the leader: a follower's heartbeat reads the lease row and probes the leader, and
//! once the lease is free or lapsed takes it and leads in place; a leader watches for the loss
//! of its lease to another process.

use std::sync::Arc;

use super::error::FleetError;
use super::lead::{Leader, LeaderPlan, lead};
use crate::http::fleet::Door;
use crate::store::Store;
use crate::store::lease::{Holder, Lease};

/// Resolves once this server leads and its store has lost the lease to another process, with
/// what the store says of it.
pub(super) async fn lease_lost(door: &Door) -> String {
    let mut look = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        look.tick().await;
        if let Some(lost) = door.leading().and_then(|app| app.wb.store()?.lease_lost()) {
            return lost;
        }
    }
}

/// A follower's heartbeat: every beat of the lease it reads the lease row (where the leader is
/// now) and probes the leader; once the lease is free or lapsed it tries to take it and, if it
/// gets it, becomes the leader in place. A forward that failed makes it look at once.
pub(super) async fn follow(plan: Arc<LeaderPlan>, door: Arc<Door>, probe: Arc<Store>, me: Lease) -> Option<Leader> {
    let mut beat = tokio::time::interval(me.heartbeat());
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = beat.tick() => {}
            () = door.stale.notified() => {}
        }
        let read = {
            let probe = probe.clone();
            tokio::task::spawn_blocking(move || probe.read(|db| db.lease_holder())).await
        };
        let holder = match read {
            Ok(Ok(h)) => {
                door.database(None);
                h
            }
            Ok(Err(e)) => {
                door.database(Some(e.to_string()));
                continue;
            }
            Err(e) => {
                door.database(Some(e.to_string()));
                continue;
            }
        };
        match holder {
            Some(h) if !h.lapsed() && h.holder != me.holder => {
                door.follow(h);
                door.probe_leader().await;
            }
            _ => match take_over(&plan, &door, &me).await {
                Ok(Ok(leader)) => {
                    door.lead(leader.app.clone());
                    eprintln!(
                        "simtree: took over the database: this server leads it now (others reach it at {})",
                        me.address.as_deref().unwrap_or("?")
                    );
                    return Some(leader);
                }
                Ok(Err(h)) => {
                    door.follow(h);
                    door.probe_leader().await;
                }
                Err(e) => {
                    eprintln!("simtree: could not take over the database: {e}");
                    door.database(Some(e.to_string()));
                }
            },
        }
    }
}

/// [`lead`] from a follower: while it takes the lease and builds the leader, requests other
/// followers forward here are told to retry (see `Door::taking_over`).
async fn take_over(plan: &Arc<LeaderPlan>, door: &Door, me: &Lease) -> Result<Result<Leader, Holder>, FleetError> {
    door.taking_over(true);
    let led = lead(plan.clone(), Some(me.clone())).await;
    if !matches!(led, Ok(Ok(_))) {
        door.taking_over(false);
    }
    led
}
