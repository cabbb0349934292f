//! The model stamp's digest (`kvsim::MODEL`): `build.rs` computes it over the sources under
//! `src/` (this file is compiled into the build script too, `#[path]`), and a test recomputes it
//! at test time to catch a stamp that does not match the sources it was built from. Files are
//! taken in path order with their relative names, lengths and bytes; line endings are normalised,
//! so a checkout with CRLF files stamps the same model.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "toml" || x == "json") {
            out.push(p);
        }
    }
}

/// The digest of the sources under `src` (None when there are none: a stamp of nothing) and the
/// files read, for `cargo:rerun-if-changed`.
pub fn digest(src: &Path) -> Option<(u64, Vec<PathBuf>)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    if files.is_empty() {
        return None;
    }
    files.sort();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for f in &files {
        let rel = f.strip_prefix(src).ok()?.to_string_lossy().replace('\\', "/");
        let text = std::fs::read(f).ok()?.into_iter().filter(|b| *b != b'\r').collect::<Vec<u8>>();
        h.update(rel.as_bytes());
        h.update(&[0]);
        h.update(&(text.len() as u64).to_le_bytes());
        h.update(&text);
    }
    Some((h.digest(), files))
}

#[cfg(test)]
mod tests {
    /// The stamp this library was built with is the digest of the sources it was built from. It
    /// was not: `build.rs` read the folder named when it was compiled (`env!`), and a build script
    /// compiled in a fresh clone sharing the target folder (`.ci/run`) was reused after the clone
    /// was gone, so every later build stamped the digest of nothing, whatever its model.
    #[test]
    fn the_stamp_is_the_sources_digest() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let (d, files) = super::digest(&src).expect("sources");
        assert!(files.len() > 20, "{files:?}");
        assert_eq!(format!("{d:016x}"), crate::MODEL, "stale stamp: `cargo clean -p kvsim` and build again");
    }
}
