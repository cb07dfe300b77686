//! The methods both typed maps share, with the same names, arguments and meaning: written
//! once, over each map's representations (inline words, records, and for the ordered map,
//! leaves).

/// `get`, `get_into`, `get_with`, `contains_key`, `insert`, `upsert`, `put`, `remove`, `len`,
/// `is_empty`, `check` and `name` of a typed map whose `repr` is the enum `$repr` of
/// `Words(core)` and `Records(core)`, and of `$leaves(core)` if named (a map of leaves: the
/// records' calls on its leaf map, behind its writer gate as theirs are).
///
/// `get`, `insert`, `upsert`, `put` and `remove` are small and always inlined where they are
/// called: a map of words runs its structure's call from there, and the maps of bytes call an
/// out-of-line `*_encoded` twin. With every representation's path in one body they were too
/// large to inline, and the word maps' calls paid a frame and a result copy each (about 35
/// instructions of a CCEH upsert's 400 under callgrind on `benches/examples/ycsb_profile.rs`).
macro_rules! typed_map_methods {
    ($repr:ident $(, $leaves:ident)?) => {
        /// The value of `key`.
        #[inline(always)]
        pub fn get(&self, key: impl Encode<K>) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => core
                    .get(key.encode().word())?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                _ => self.get_encoded(key.encode().bytes()),
            }
        }

        /// [`Self::get`] of an encoded key.
        #[inline(never)]
        fn get_encoded(&self, key: &[u8]) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => core
                    .get(encode_word(key))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => core
                    .raw
                    .get(key)?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),
                $($repr::$leaves(core) => core
                    .raw
                    .get(key)?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),)?
            }
        }

        /// The value of `key` as its encoding (see [`crate::types`]: a `Vec<u8>`'s or a
        /// `String`'s own bytes, an integer's big-endian bytes) written into `out`, which is
        /// cleared first and its capacity reused: a read allocates nothing once `out` has held
        /// the largest value read. Whether `key` is present (`out` is left empty if not).
        pub fn get_into(&self, key: impl Encode<K>, out: &mut Vec<u8>) -> Result<bool, Error> {
            let key = key.encode();
            match &self.repr {
                $repr::Words(core) => {
                    out.clear();
                    match core.get(key.word())? {
                        Some(word) => {
                            word_encoding::<V>(word, out);
                            Ok(true)
                        }
                        None => Ok(false),
                    }
                }
                $repr::Records(core) => Ok(core.raw.get_into(key.bytes(), out)?),
                $($repr::$leaves(core) => Ok(core.raw.get_into(key.bytes(), out)?),)?
            }
        }

        /// The value of `key`, lent to `read` as its encoding (as [`Self::get_into`] writes it)
        /// from a buffer the calling thread keeps: no allocation per call once the buffer has
        /// grown to the values read (one past 1 MiB is given back after the call). `None`, and
        /// `read` not called, if `key` is absent. (The ordered map's scans lend their pairs
        /// likewise: [`BTreeMap::range_with`](super::BTreeMap::range_with).)
        pub fn get_with<R>(
            &self,
            key: impl Encode<K>,
            read: impl FnOnce(&[u8]) -> R,
        ) -> Result<Option<R>, Error> {
            with_read_buffer(|buffer| {
                if self.get_into(key, buffer)? {
                    Ok(Some(read(buffer)))
                } else {
                    Ok(None)
                }
            })
        }

        /// Whether `key` is in the map.
        pub fn contains_key(&self, key: impl Encode<K>) -> Result<bool, Error> {
            let key = key.encode();
            match &self.repr {
                $repr::Words(core) => Ok(core.get(key.word())?.is_some()),
                $repr::Records(core) => Ok(core.raw.contains_key(key.bytes())?),
                $($repr::$leaves(core) => Ok(core.raw.contains_key(key.bytes())?),)?
            }
        }

        /// Insert `key -> value` if `key` is absent: `true` if inserted, `false` (and nothing
        /// changed) if present. Durable when it returns.
        #[inline(always)]
        pub fn insert(&self, key: impl Encode<K>, value: impl Encode<V>) -> Result<bool, Error> {
            match &self.repr {
                $repr::Words(core) => core.insert(key.encode().word(), value.encode().word()),
                _ => self.insert_encoded(key.encode().bytes(), value.encode().bytes()),
            }
        }

        /// [`Self::insert`] of an encoded key and value.
        #[inline(never)]
        fn insert_encoded(&self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
            match &self.repr {
                $repr::Words(core) => core.insert(encode_word(key), encode_word(value)),
                $repr::Records(core) => {
                    let _section = core.enter()?;
                    Ok(core.raw.insert(key, value)?)
                }
                $($repr::$leaves(core) => {
                    let _section = core.enter()?;
                    Ok(core.raw.insert(key, value)?)
                })?
            }
        }

        /// Set `key -> value` whether or not `key` is present; the old value if it was. Durable
        /// when it returns.
        #[inline(always)]
        pub fn upsert(
            &self,
            key: impl Encode<K>,
            value: impl Encode<V>,
        ) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => core
                    .upsert(key.encode().word(), value.encode().word())?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                _ => self.upsert_encoded(key.encode().bytes(), value.encode().bytes()),
            }
        }

        /// [`Self::upsert`] of an encoded key and value.
        #[inline(never)]
        fn upsert_encoded(&self, key: &[u8], value: &[u8]) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => core
                    .upsert(encode_word(key), encode_word(value))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => {
                    let _section = core.enter()?;
                    core.raw
                        .upsert(key, value)?
                        .map(|v| decode(v, "value", &core.name))
                        .transpose()
                }
                $($repr::$leaves(core) => {
                    let _section = core.enter()?;
                    core.raw
                        .upsert(key, value)?
                        .map(|v| decode(v, "value", &core.name))
                        .transpose()
                })?
            }
        }

        /// Set `key -> value` whether or not `key` is present, as [`Self::upsert`] does, without
        /// returning the old value: `true` if `key` was absent (a new key), `false` if a value
        /// was replaced. Durable when it returns. For a write that drops the old value (a
        /// `SET`): a map of the leaf layout neither reads nor checks it, nor copies it out.
        ///
        /// ```
        /// # use pmem_structures::{BTreeLayout, Store, StoreOptions};
        /// # fn main() -> Result<(), pmem_structures::Error> {
        /// # let store = Store::anonymous(16 << 20, &StoreOptions::new())?;
        /// let keys = store.btree_map_with::<String, String>("keys", BTreeLayout::leaves())?;
        /// assert!(keys.put("user:1", "ada")?); // a new key
        /// assert!(!keys.put("user:1", "brian")?); // replaced, the old value dropped
        /// assert_eq!(keys.get("user:1")?.as_deref(), Some("brian"));
        /// let counts = store.hash_map::<String, u64>("counts")?;
        /// assert!(counts.put("visits", 1)? && !counts.put("visits", 2)?);
        /// # Ok(())
        /// # }
        /// ```
        #[inline(always)]
        pub fn put(&self, key: impl Encode<K>, value: impl Encode<V>) -> Result<bool, Error> {
            match &self.repr {
                $repr::Words(core) => Ok(core.upsert(key.encode().word(), value.encode().word())?.is_none()),
                _ => self.put_encoded(key.encode().bytes(), value.encode().bytes()),
            }
        }

        /// [`Self::put`] of an encoded key and value.
        #[inline(never)]
        fn put_encoded(&self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
            match &self.repr {
                $repr::Words(core) => {
                    Ok(core.upsert(encode_word(key), encode_word(value))?.is_none())
                }
                $repr::Records(core) => {
                    let _section = core.enter()?;
                    Ok(core.raw.upsert(key, value)?.is_none())
                }
                $($repr::$leaves(core) => {
                    let _section = core.enter()?;
                    Ok(core.raw.put(key, value)?)
                })?
            }
        }

        /// Remove `key`; its value if it was present. Durable when it returns.
        #[inline(always)]
        pub fn remove(&self, key: impl Encode<K>) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => core
                    .remove(key.encode().word())?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                _ => self.remove_encoded(key.encode().bytes()),
            }
        }

        /// [`Self::remove`] of an encoded key.
        #[inline(never)]
        fn remove_encoded(&self, key: &[u8]) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => core
                    .remove(encode_word(key))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => {
                    let _section = core.enter()?;
                    core.raw
                        .remove(key)?
                        .map(|v| decode(v, "value", &core.name))
                        .transpose()
                }
                $($repr::$leaves(core) => {
                    let _section = core.enter()?;
                    core.raw
                        .remove(key)?
                        .map(|v| decode(v, "value", &core.name))
                        .transpose()
                })?
            }
        }

        /// How many keys the map holds.
        pub fn len(&self) -> u64 {
            match &self.repr {
                $repr::Words(core) => core.len(),
                $repr::Records(core) => core.raw.len(),
                $($repr::$leaves(core) => core.raw.len(),)?
            }
        }

        /// Whether the map holds no key.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Walk the whole structure (and every record) and check every invariant it can; the
        /// number of keys. Changes nothing.
        pub fn check(&self) -> Result<u64, Error> {
            match &self.repr {
                $repr::Words(core) => core.check(),
                $repr::Records(core) => Ok(core.raw.check()?),
                $($repr::$leaves(core) => Ok(core.raw.check()?),)?
            }
        }

        /// Walk the whole structure read-only and report every violation found (see
        /// [`Store::verify`](crate::Store::verify) for the whole store).
        pub fn verify(&self) -> $crate::verify::Verification {
            match &self.repr {
                $repr::Words(core) => core.raw.verify(),
                $repr::Records(core) => core.raw.verify(),
                $($repr::$leaves(core) => core.raw.verify(),)?
            }
        }

        /// The value of `key` as `batch` would leave it: the batch's own write of it, else the
        /// map's. From now until the batch ends, no single writer changes the map (they wait).
        pub fn get_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
        ) -> Result<Option<V>, Error> {
            let i = batch.touch(self.batch_map()?)?;
            self.read_in(batch, i, key.encode().bytes())
        }

        /// Whether `key` is in the map as `batch` would leave it (see [`Self::get_in`]).
        pub fn contains_key_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
        ) -> Result<bool, Error> {
            Ok(self.get_in(batch, key)?.is_some())
        }

        /// [`Self::insert`] in `batch`: `true` (and the batch will insert it) if `key` is absent
        /// as the batch would leave it, `false` (and nothing added) if present. Made durable by
        /// the batch's commit, with its other writes.
        pub fn insert_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
            value: impl Encode<V>,
        ) -> Result<bool, Error> {
            let (key, value) = (key.encode(), value.encode());
            let i = batch.touch(self.batch_map()?)?;
            if self.read_in(batch, i, key.bytes())?.is_some() {
                return Ok(false);
            }
            self.write_in(batch, i, key.bytes(), Some(value.bytes()))?;
            Ok(true)
        }

        /// [`Self::upsert`] in `batch`: the value `key` had as the batch would leave it.
        pub fn upsert_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
            value: impl Encode<V>,
        ) -> Result<Option<V>, Error> {
            let (key, value) = (key.encode(), value.encode());
            let i = batch.touch(self.batch_map()?)?;
            let old = self.read_in(batch, i, key.bytes())?;
            self.write_in(batch, i, key.bytes(), Some(value.bytes()))?;
            Ok(old)
        }

        /// [`Self::remove`] in `batch`: the value `key` had as the batch would leave it.
        pub fn remove_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
        ) -> Result<Option<V>, Error> {
            let key = key.encode();
            let i = batch.touch(self.batch_map()?)?;
            let old = self.read_in(batch, i, key.bytes())?;
            if old.is_some() {
                self.write_in(batch, i, key.bytes(), None)?;
            }
            Ok(old)
        }

        /// Set `key -> value` in `batch` without reading it (RocksDB's `WriteBatch::put`): the
        /// map is held only from the commit on, so a batch of these keeps single writers out
        /// for the commit alone.
        pub fn put_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
            value: impl Encode<V>,
        ) -> Result<(), Error> {
            let (key, value) = (key.encode(), value.encode());
            let i = batch.touch(self.batch_map()?)?;
            self.write_in(batch, i, key.bytes(), Some(value.bytes()))
        }

        /// Remove `key` in `batch` without reading it (see [`Self::put_in`]).
        pub fn delete_in(
            &self,
            batch: &mut WriteBatch<B>,
            key: impl Encode<K>,
        ) -> Result<(), Error> {
            let key = key.encode();
            let i = batch.touch(self.batch_map()?)?;
            self.write_in(batch, i, key.bytes(), None)
        }

        /// The value of the encoded `key` in map `i` of `batch`, as the batch would leave it.
        fn read_in(
            &self,
            batch: &mut WriteBatch<B>,
            i: usize,
            key: &[u8],
        ) -> Result<Option<V>, Error> {
            match &self.repr {
                $repr::Words(core) => batch
                    .read_word(i, encode_word(key))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => batch
                    .read_record(i, key)?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),
                $($repr::$leaves(core) => batch
                    .read_record(i, key)?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),)?
            }
        }

        /// Write the encoded `key` (and `value`; `None` removes it) in map `i` of `batch`.
        fn write_in(
            &self,
            batch: &mut WriteBatch<B>,
            i: usize,
            key: &[u8],
            value: Option<&[u8]>,
        ) -> Result<(), Error> {
            match &self.repr {
                $repr::Words(_) => batch.write_word(i, encode_word(key), value.map(encode_word)),
                $repr::Records(_) => batch.write_record(i, key, value),
                $($repr::$leaves(_) => batch.write_record(i, key, value),)?
            }
        }

        /// The map's name in its store.
        pub fn name(&self) -> &str {
            match &self.repr {
                $repr::Words(core) => &core.name,
                $repr::Records(core) => &core.name,
                $($repr::$leaves(core) => &core.name,)?
            }
        }
    };
}

pub(super) use typed_map_methods;
