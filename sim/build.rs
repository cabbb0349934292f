//! The model stamp (`kvsim::MODEL`): a digest of this crate's sources, so that a campaign's
//! checkpoint records which model judged its runs and a resume by another kvsim is refused
//! instead of mixing two models' verdicts in one table (`Campaign::check_resumes`). Any edit of
//! `src/` changes it, a comment's too: conservative, never silently different. Line endings are
//! normalised, so a checkout with CRLF files stamps the same model.

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

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src").to_string_lossy().replace('\\', "/");
        let text = std::fs::read(f).expect("readable source").into_iter().filter(|b| *b != b'\r').collect::<Vec<u8>>();
        h.update(rel.as_bytes());
        h.update(&[0]);
        h.update(&(text.len() as u64).to_le_bytes());
        h.update(&text);
    }
    println!("cargo:rustc-env=KVSIM_MODEL={:016x}", h.digest());
}
