//! Byte-string keys and values: user profiles by name in a hash map, and an ordered index of
//! "team:user" keys scanned by prefix; both reopened from the file with nothing passed again.
//! `cargo run --release -p pmem-structures --example profiles`
use pmem_structures::{Granularity, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path =
        std::env::temp_dir().join(format!("pmem-example-profiles-{}.pool", std::process::id()));
    let options = StoreOptions::new().granularity(Granularity::Emulated); // tmpfs: StoreOptions
    {
        let store = Store::create(&path, 64 << 20, &options)?;
        let profiles = store.hash_map::<String, Vec<u8>>("profiles")?;
        let members = store.btree_map::<String, u64>("members")?;
        for (i, (team, user)) in [
            ("red", "ada"),
            ("blue", "alan"),
            ("red", "grace"),
            ("blue", "edsger"),
        ]
        .into_iter()
        .enumerate()
        {
            let profile = format!(
                r#"{{"name":"{user}","team":"{team}","since":{}}}"#,
                2020 + i
            );
            profiles.insert(user, profile.as_bytes())?;
            members.insert(format!("{team}:{user}"), i as u64)?;
        }
        // An overwrite writes a new record; the old one is freed once no reader can see it.
        profiles.upsert(
            "ada",
            br#"{"name":"ada","team":"red","since":2020,"admin":true}"#,
        )?;
    } // the last handle closes the file and releases its lock

    let store = Store::open_with(&path, &options)?;
    let profiles = store.hash_map::<String, Vec<u8>>("profiles")?;
    let members = store.btree_map::<String, u64>("members")?;
    for pair in members.range("red:".."red;") {
        let (member, since) = pair?;
        let user = member.trim_start_matches("red:");
        let profile = profiles.get(user)?.ok_or("a member without a profile")?;
        println!("{member} ({since}): {}", String::from_utf8_lossy(&profile));
    }
    assert!(String::from_utf8(profiles.get("ada")?.unwrap_or_default())?.contains("admin"));
    assert_eq!(members.range("blue:".."blue;").count(), 2);
    store.check_blocks()?; // every allocated block is a record or a structure's: no leak
    drop((store, profiles, members));
    std::fs::remove_file(&path)?;
    Ok(())
}
