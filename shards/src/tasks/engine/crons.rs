//! TASK.CRON on the engine: schedules that submit a task to their queue at each tick. A cron
//! lives on its queue's shard, so a tick's task is made in the same step that moves the
//! schedule on, and the journal records both as one `advance` (replay makes the same task at
//! the same instant). A tick's task id is `cron:<name>:<tick ms>` (tagged with the queue's
//! slot), so one tick can never make two tasks, however many clients define the schedule.
//! A tick missed while the server was down is made up when it is back, up to
//! [`CRON_CATCHUP_MAX`] per schedule; older missed ticks are skipped.

use bytes::Bytes;

use super::Engine;
use crate::tasks::cron::Schedule;
use crate::tasks::model::SubmitOptions;

/// Most missed ticks a schedule makes up at once.
pub const CRON_CATCHUP_MAX: u64 = 100;
/// Most schedules one shard keeps.
pub const CRONS_MAX: usize = 100_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronEntry {
    pub name: Bytes,
    /// The schedule as it was given (`*/5 * * * *`, `@every 30s`).
    pub spec: Bytes,
    pub schedule: Schedule,
    pub queue: Bytes,
    pub payload: Bytes,
    /// The options each tick's task is submitted with.
    pub options: SubmitOptions,
    /// The next tick (`None`: the schedule has no more).
    pub next_ms: Option<u64>,
    pub created_ms: u64,
    /// Ticks that made a task.
    pub fired: u64,
    pub last_fired_ms: Option<u64>,
    /// Missed ticks not made up (more than `CRON_CATCHUP_MAX` at once) or refused (a full
    /// queue).
    pub skipped: u64,
}

impl Engine {
    /// Defines (or redefines) cron `name`. The same schedule again keeps its place: no tick
    /// is repeated or lost; a new schedule starts at its first tick after `now_ms`. Returns
    /// whether it is new.
    // Long: a cron's fields, each checked and set in turn.
    pub fn cron_set(
        &mut self,
        name: &[u8],
        spec: &[u8],
        queue: &[u8],
        payload: Bytes,
        options: SubmitOptions,
        now_ms: u64,
    ) -> Result<bool, String> {
        self.advance(now_ms);
        let text = std::str::from_utf8(spec).map_err(|_| "a schedule is text".to_string())?;
        let schedule = Schedule::parse(text)?;
        let existing = self.crons.get(name);
        if existing.is_none() && self.crons.len() >= CRONS_MAX {
            return Err(format!(
                "too many cron schedules on one shard ({CRONS_MAX})"
            ));
        }
        let next_ms = match existing {
            Some(old) if old.schedule == schedule => old.next_ms,
            _ => schedule.next_after(now_ms),
        };
        let (fired, last_fired_ms, skipped, created_ms) = existing
            .map_or((0, None, 0, now_ms), |old| {
                (old.fired, old.last_fired_ms, old.skipped, old.created_ms)
            });
        let created = self.cron_del(name).is_none();
        let name = Bytes::copy_from_slice(name);
        if let Some(next) = next_ms {
            self.cron_due.insert((next, name.clone()));
        }
        self.crons.insert(
            name.clone(),
            CronEntry {
                name,
                spec: Bytes::copy_from_slice(spec),
                schedule,
                queue: Bytes::copy_from_slice(queue),
                payload,
                options,
                next_ms,
                created_ms,
                fired,
                last_fired_ms,
                skipped,
            },
        );
        Ok(created)
    }

    /// Removes cron `name`; what it was.
    pub fn cron_del(&mut self, name: &[u8]) -> Option<CronEntry> {
        let entry = self.crons.remove(name)?;
        if let Some(next) = entry.next_ms {
            self.cron_due.remove(&(next, entry.name.clone()));
        }
        Some(entry)
    }

    /// Every cron here, by name.
    pub fn crons(&self) -> impl Iterator<Item = &CronEntry> {
        self.crons.values()
    }

    /// Submits the task of every tick due by `now_ms`, oldest first.
    pub(super) fn fire_crons(&mut self, now_ms: u64) {
        while let Some((due, _)) = self.cron_due.first() {
            if *due > now_ms {
                break;
            }
            let (tick, name) = self.cron_due.pop_first().expect("non-empty");
            let entry = self.crons.get(&name).expect("a due cron exists");
            let mut options = entry.options.clone();
            options.id = Some(Bytes::from(
                [b"cron:", &name[..], b":", tick.to_string().as_bytes()].concat(),
            ));
            let (queue, payload) = (entry.queue.clone(), entry.payload.clone());
            let made = self.submit_now(&queue, payload, options, None, now_ms);
            let entry = self.crons.get_mut(&name).expect("a due cron exists");
            match made {
                Ok(_) => {
                    entry.fired += 1;
                    entry.last_fired_ms = Some(tick);
                    self.cron_fired += 1;
                }
                // The tick's task exists already, or the queue refused it.
                Err(_) => entry.skipped += 1,
            }
            let mut next = entry.schedule.next_after(tick);
            // A long outage: make up the last CRON_CATCHUP_MAX ticks only.
            if let (Some(n), Schedule::Every(every)) = (next, &entry.schedule) {
                // Ticks from `n` to now, both counted.
                let behind = if n <= now_ms {
                    (now_ms - n) / every + 1
                } else {
                    0
                };
                if behind > CRON_CATCHUP_MAX {
                    let skip = behind - CRON_CATCHUP_MAX;
                    entry.skipped += skip;
                    next = Some(n + skip * every);
                }
            } else if let Some(n) = next.filter(|n| now_ms.saturating_sub(*n) > 100 * 86_400_000) {
                // A cron line 100 days behind starts again from now.
                entry.skipped += 1;
                next = entry.schedule.next_after(now_ms.max(n));
            }
            entry.next_ms = next;
            if let Some(next) = next {
                self.cron_due.insert((next, name));
            }
        }
    }

    /// Moves `other`'s crons whose queue `owns` accepts into this engine (a restart onto
    /// another shard count).
    pub(super) fn absorb_crons(&mut self, other: &mut Engine, owns: &dyn Fn(&[u8]) -> bool) {
        let names: Vec<Bytes> = other
            .crons
            .values()
            .filter(|c| owns(&c.queue))
            .map(|c| c.name.clone())
            .collect();
        for name in names {
            let entry = other.cron_del(&name).expect("listed");
            if let Some(next) = entry.next_ms {
                self.cron_due.insert((next, name.clone()));
            }
            self.crons.insert(name, entry);
        }
    }
}
