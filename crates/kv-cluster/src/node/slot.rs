//! A key's hash slot, as Redis Cluster computes it: CRC16 (XMODEM) of the key, or of its hash
//! tag (the bytes between the first `{` and the next `}`, if there are any), modulo 16,384.

/// The number of hash slots.
pub const SLOTS: u16 = 16_384;

/// The slot of `key`.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::key_slot;

    #[test]
    fn slots_are_redis_s() {
        // As `CLUSTER KEYSLOT` answers on Redis 7.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        // The CRC16/XMODEM check value.
        assert_eq!(key_slot(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag hashes the whole key; only the first `{` counts.
        assert_eq!(key_slot(b"foo{}{bar}"), {
            crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % 16384
        });
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b""), 0);
    }
}
