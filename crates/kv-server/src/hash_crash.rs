//! The hash maps under simulated crashes: at every event of `HSET` of several fields (a new
//! hash, and new and existing fields of one), `HSET` of one existing field (a single write),
//! `HDEL` of some fields and of the last ones, `DEL` of a hash, `SET` over a hash, `RENAME` of a
//! hash over another, lazy and active expiry of a hash, and the steps that reclaim deleted
//! hashes' fields (the same `Maps` functions the server runs, on a store of the simulator),
//! every crash image must recover to a store whose keys, types, fields and deadlines are the
//! model's after the steps that returned, or after the interrupted one too, whose maps agree
//! (`Maps::check`: every hash's count is its fields', every field entry a live or listed
//! hash's), and in which reclaiming then runs to the end and leaves exactly the live hashes'
//! fields.

use std::collections::BTreeMap as Model;
use std::ops::Bound;
use std::sync::Arc;

use pmem_structures::raw::pmem_ordering::sim::SimBackend;
use pmem_structures::raw::pmem_ordering::Pool;
use pmem_structures::{Error, Store};

use crate::db::Maps;
use crate::expiry_crash::{crash_at_every_event, recovered};
use crate::hashes::{field_key, field_of, field_range, Kind};

type SimStore = Store<SimBackend>;
type SimMaps = Maps<SimBackend>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    String(Vec<u8>),
    Hash(Model<Vec<u8>, Vec<u8>>),
}

/// Key -> (value, deadline).
type State = Model<Vec<u8>, (Value, Option<u64>)>;

type Pairs = &'static [(&'static str, &'static str)];

/// One command's writes, as the server makes them.
#[derive(Clone, Debug)]
enum Step {
    HSet(&'static str, Pairs),
    HDel(&'static str, &'static [&'static str]),
    Del(&'static str),
    /// SET key value (no deadline) over whatever the key holds.
    Set(&'static str, &'static str),
    Rename(&'static str, &'static str),
    /// EXPIRE of an existing key.
    Deadline(&'static str, u64),
    /// A lazy delete of a key past its deadline.
    Expire(&'static str),
    /// One step of active expiry at this time.
    Active(u64),
    /// One step of reclaiming deleted hashes' fields.
    Reclaim,
}

fn bytes(text: &str) -> Vec<u8> {
    text.as_bytes().to_vec()
}

fn apply(state: &mut State, step: &Step) {
    match *step {
        Step::HSet(key, pairs) => {
            let entry = state
                .entry(bytes(key))
                .or_insert((Value::Hash(Model::new()), None));
            let Value::Hash(fields) = &mut entry.0 else {
                panic!("HSET of a string in the steps");
            };
            for (field, value) in pairs {
                fields.insert(bytes(field), bytes(value));
            }
        }
        Step::HDel(key, gone) => {
            let Some((Value::Hash(fields), _)) = state.get_mut(key.as_bytes()) else {
                panic!("HDEL of no hash in the steps");
            };
            for field in gone {
                fields.remove(field.as_bytes());
            }
            if fields.is_empty() {
                state.remove(key.as_bytes());
            }
        }
        Step::Del(key) | Step::Expire(key) => drop(state.remove(key.as_bytes())),
        Step::Set(key, value) => {
            drop(state.insert(bytes(key), (Value::String(bytes(value)), None)))
        }
        Step::Rename(from, to) => {
            let moved = state.remove(from.as_bytes()).expect("an existing key");
            state.insert(bytes(to), moved);
        }
        Step::Deadline(key, deadline) => {
            state.get_mut(key.as_bytes()).expect("an existing key").1 = Some(deadline);
        }
        Step::Active(now) => state.retain(|_, (_, deadline)| deadline.is_none_or(|d| d > now)),
        Step::Reclaim => {}
    }
}

fn run(store: &SimStore, maps: &SimMaps, step: &Step) -> Result<(), Error> {
    match *step {
        Step::HSet(key, pairs) => {
            let key = key.as_bytes();
            let meta = maps.hash_meta(key)?;
            let pairs: Vec<(&[u8], &[u8])> = pairs
                .iter()
                .map(|(f, v)| (f.as_bytes(), v.as_bytes()))
                .collect();
            // What `Db::hash_set` does for one existing field: a single write.
            if let (Some(meta), [(field, value)]) = (meta, &pairs[..]) {
                let entry = field_key(meta.id, field);
                if maps.fields.contains_key(&entry[..])? {
                    return maps.fields.upsert(&entry[..], *value).map(drop);
                }
            }
            store.write(|batch| maps.hash_set_in(batch, key, meta, &pairs).map(drop))
        }
        Step::HDel(key, fields) => {
            let key = key.as_bytes();
            let meta = maps.hash_meta(key)?.expect("a hash");
            let fields: Vec<&[u8]> = fields.iter().map(|f| f.as_bytes()).collect();
            store.write(|batch| maps.hash_delete_in(batch, key, meta, &fields).map(drop))
        }
        Step::Del(key) => store.write(|batch| maps.delete_key_in(batch, key.as_bytes()).map(drop)),
        Step::Set(key, value) => {
            let (key, value) = (key.as_bytes(), value.as_bytes());
            let old = maps.deadline(key)?;
            store.write(|batch| maps.write_in(batch, key, value, old, None))
        }
        Step::Rename(from, to) => {
            let value = maps.keys.get(from.as_bytes())?.expect("an existing key");
            store.write(|batch| maps.move_key_in(batch, from.as_bytes(), to.as_bytes(), value))
        }
        Step::Deadline(key, deadline) => {
            let old = maps.deadline(key.as_bytes())?;
            store.write(|batch| maps.change_deadline_in(batch, key.as_bytes(), old, Some(deadline)))
        }
        Step::Expire(key) => {
            let deadline = maps.deadline(key.as_bytes())?.expect("a deadline");
            store.write(|batch| maps.delete_in(batch, key.as_bytes(), deadline))
        }
        Step::Active(now) => {
            let sample = maps.due_sample(now)?;
            assert!(!sample.is_empty(), "the active step finds nothing due");
            store.write(|batch| maps.expire_sample_in(batch, &sample).map(drop))
        }
        Step::Reclaim => {
            let step = store.write(|batch| maps.reclaim_step_in(batch))?;
            assert!(step.is_some(), "the reclaim step finds nothing listed");
            Ok(())
        }
    }
}

/// The keyspace as the maps hold it, after checking that they agree.
fn observe(maps: &SimMaps) -> Result<State, String> {
    let e = |e: Error| e.to_string();
    maps.check().map_err(e)??;
    let mut state = State::new();
    for entry in maps.keys.iter() {
        let (key, value) = entry.map_err(e)?;
        let deadline = maps.deadline(&key).map_err(e)?;
        let value = match maps.kind(&key, Some(value)).map_err(e)? {
            Kind::Hash(meta) => {
                let (low, high) = field_range(meta.id, Bound::Unbounded, Bound::Unbounded);
                let mut fields = Model::new();
                for entry in maps.fields.range::<&[u8], _>((
                    low.as_ref().map(Vec::as_slice),
                    high.as_ref().map(Vec::as_slice),
                )) {
                    let (entry, value) = entry.map_err(e)?;
                    fields.insert(field_of(&entry).expect("a field").to_vec(), value);
                }
                Value::Hash(fields)
            }
            Kind::String(value) => Value::String(value),
            Kind::Absent => return Err(format!("{key:?} listed and absent")),
        };
        state.insert(key, (value, deadline));
    }
    Ok(state)
}

fn check_image(
    pool: &Arc<Pool<SimBackend>>,
    done: usize,
    expected: &[State],
) -> Result<(), String> {
    let (store, maps) = recovered(pool)?;
    let now = observe(&maps)?;
    let admitted = &expected[done..(done + 2).min(expected.len())];
    if !admitted.contains(&now) {
        return Err(format!(
            "after {done} steps the keyspace holds {now:?}, none of the model's {admitted:?}"
        ));
    }
    // Reclaiming goes on from where the crash left it, to the end.
    let e = |e: Error| e.to_string();
    while store
        .write(|batch| maps.reclaim_step_in(batch))
        .map_err(e)?
        .is_some()
    {}
    let live: usize = now
        .values()
        .map(|(value, _)| match value {
            Value::Hash(fields) => fields.len(),
            Value::String(_) => 0,
        })
        .sum();
    if maps.fields.len() != live as u64 || !maps.reclaim.is_empty() {
        return Err(format!(
            "after reclaiming, {} field entries for {live} live fields, {} ids listed",
            maps.fields.len(),
            maps.reclaim.len()
        ));
    }
    if observe(&maps)? != now {
        return Err("reclaiming changed what the keys hold".into());
    }
    Ok(())
}

#[test]
fn hash_writes_are_whole_at_every_crash_point() {
    let setup = [
        Step::Set("s", "string"),
        Step::HSet("old", &[("x", "1"), ("y", "2")]),
    ];
    let steps = vec![
        Step::HSet("h", &[("a", "1"), ("b", "2"), ("c", "3")]),
        Step::HSet("h", &[("b", "20"), ("d", "4"), ("d", "5")]),
        Step::HSet("h", &[("a", "10")]),
        Step::HDel("h", &["a", "nope", "c"]),
        Step::Rename("h", "old"),
        Step::Reclaim,
        Step::Del("old"),
        Step::HSet("g", &[("f", "1"), ("g", "2")]),
        Step::Set("g", "over"),
        Step::HSet("e", &[("k", "v")]),
        Step::Deadline("e", 500),
        Step::Expire("e"),
        Step::HSet("t", &[("k", "v"), ("l", "w")]),
        Step::Deadline("t", 700),
        Step::Active(1_000),
        Step::Reclaim,
        Step::HSet("z", &[("only", "1")]),
        Step::HDel("z", &["only"]),
    ];
    let mut state = State::new();
    setup.iter().for_each(|step| apply(&mut state, step));
    let mut expected = vec![state.clone()];
    for step in &steps {
        apply(&mut state, step);
        expected.push(state.clone());
    }
    let report = crash_at_every_event("hash maps", 34, &setup, &steps, run, |pool, done| {
        check_image(pool, done, &expected)
    });
    println!("{} crash points, {} images", report.points, report.images);
}
