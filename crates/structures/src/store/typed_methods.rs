//! The methods both typed maps share, with the same names, arguments and meaning: written
//! once, over either map's two representations (inline words, or records).

/// `get`, `contains_key`, `insert`, `upsert`, `remove`, `len`, `is_empty`, `check` and `name`
/// of a typed map whose `repr` is the enum `$repr` of `Words(core)` and `Records(core)`.
macro_rules! typed_map_methods {
    ($repr:ident) => {
        /// The value of `key`.
        pub fn get(&self, key: impl Encode<K>) -> Result<Option<V>, Error> {
            let key = key.encode();
            match &self.repr {
                $repr::Words(core) => core
                    .get(encode_word(key.bytes()))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => core
                    .raw
                    .get(key.bytes())?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),
            }
        }

        /// Whether `key` is in the map.
        pub fn contains_key(&self, key: impl Encode<K>) -> Result<bool, Error> {
            let key = key.encode();
            match &self.repr {
                $repr::Words(core) => Ok(core.get(encode_word(key.bytes()))?.is_some()),
                $repr::Records(core) => Ok(core.raw.contains_key(key.bytes())?),
            }
        }

        /// Insert `key -> value` if `key` is absent: `true` if inserted, `false` (and nothing
        /// changed) if present. Durable when it returns.
        pub fn insert(&self, key: impl Encode<K>, value: impl Encode<V>) -> Result<bool, Error> {
            let (key, value) = (key.encode(), value.encode());
            match &self.repr {
                $repr::Words(core) => {
                    core.insert(encode_word(key.bytes()), encode_word(value.bytes()))
                }
                $repr::Records(core) => Ok(core.raw.insert(key.bytes(), value.bytes())?),
            }
        }

        /// Set `key -> value` whether or not `key` is present; the old value if it was. Durable
        /// when it returns.
        pub fn upsert(
            &self,
            key: impl Encode<K>,
            value: impl Encode<V>,
        ) -> Result<Option<V>, Error> {
            let (key, value) = (key.encode(), value.encode());
            match &self.repr {
                $repr::Words(core) => core
                    .upsert(encode_word(key.bytes()), encode_word(value.bytes()))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => core
                    .raw
                    .upsert(key.bytes(), value.bytes())?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),
            }
        }

        /// Remove `key`; its value if it was present. Durable when it returns.
        pub fn remove(&self, key: impl Encode<K>) -> Result<Option<V>, Error> {
            let key = key.encode();
            match &self.repr {
                $repr::Words(core) => core
                    .remove(encode_word(key.bytes()))?
                    .map(|w| decode_word(w, "value", &core.name))
                    .transpose(),
                $repr::Records(core) => core
                    .raw
                    .remove(key.bytes())?
                    .map(|v| decode(v, "value", &core.name))
                    .transpose(),
            }
        }

        /// How many keys the map holds.
        pub fn len(&self) -> u64 {
            match &self.repr {
                $repr::Words(core) => core.len(),
                $repr::Records(core) => core.raw.len(),
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
            }
        }

        /// Walk the whole structure read-only and report every violation found (see
        /// [`Store::verify`](crate::Store::verify) for the whole store).
        pub fn verify(&self) -> $crate::verify::Verification {
            use $crate::store::raw::Structure;
            match &self.repr {
                $repr::Words(core) => core.raw.verify(),
                $repr::Records(core) => core.raw.verify(),
            }
        }

        /// The map's name in its store.
        pub fn name(&self) -> &str {
            match &self.repr {
                $repr::Words(core) => &core.name,
                $repr::Records(core) => &core.name,
            }
        }
    };
}

pub(super) use typed_map_methods;
