//! Memory harness for the peer hammingbird: its Rust core's streaming `Index`, loaded as
//! `benchmarks/bench_memory.py` loads every system (one fresh process, the same fingerprints
//! in the same order and batches), with resident memory read from /proc/self/status.
//!
//! Usage:
//!
//! ```text
//! hammingbird-harness load FINGERPRINTS BATCH [QUERIES]
//! hammingbird-harness selftest
//! ```
//!
//! `load`: FINGERPRINTS is a file of little-endian u64 (8 bytes each, N = its size / 8), in
//! the order they are added; each is one row of `d_bytes = 8` (its 8 bytes as they are, as
//! numpy's `.view(np.uint8)` passes them to the Python binding). An `Index::new(8, 3)` is
//! filled by `add_batch` of BATCH rows at a time, read from the file into one reused buffer.
//! Before loading, a warm-up index of 1,000 rows is made and dropped, then VmRSS is read (the
//! baseline); after loading VmRSS and VmHWM. QUERIES (optional, the same format) are then
//! looked up with `Index::query`; their answers (row number in load order, distance) are
//! printed for the caller to check against brute force. Prints one line of JSON:
//! `{"n", "batch", "len", "load_s", "baseline_rss_bytes", "rss_load_bytes",
//! "hwm_load_bytes", "hits": [[[row, distance], ...] per query]}`.
//!
//! `selftest`: 20,000 pseudo-random fingerprints with near-duplicates planted at distances 0
//! to 5, the index's answers to 400 queries compared with brute force; exit status 1 on any
//! difference.
//!
//! Errors (a missing file, a size not a multiple of 8, a bad argument) print a message on
//! stderr and exit with status 2.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, Read};
use std::process::ExitCode;
use std::time::Instant;

use hammingbird_core::Index;

const D_BYTES: usize = 8;
const K: u32 = 3;
const WARM_ROWS: u64 = 1_000;

/// A `VmRSS`/`VmHWM` figure of /proc/self/status, in bytes.
fn status(field: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib: u64 = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("unreadable {field} in /proc/self/status"))?;
            return Ok(kib * 1024);
        }
    }
    Err(format!("no {field} in /proc/self/status"))
}

/// splitmix64: the self-test's pseudo-random numbers.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rows_of(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Flip `count` distinct bits of `value`, chosen by `state`.
fn flip(value: u64, count: u32, state: &mut u64) -> u64 {
    let mut mask = 0u64;
    while mask.count_ones() < count {
        mask |= 1u64 << (splitmix(state) % 64);
    }
    value ^ mask
}

fn read_u64s(path: &str) -> Result<Vec<u64>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() % 8 != 0 {
        return Err(format!("{path}: {} bytes, not a multiple of 8", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

fn load(path: &str, batch: usize, queries: Option<&str>) -> Result<String, String> {
    if batch == 0 {
        return Err("BATCH must be at least 1".into());
    }
    let file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let size = file.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    if size % 8 != 0 {
        return Err(format!("{path}: {size} bytes, not a multiple of 8"));
    }
    let n = (size / 8) as usize;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut buffer = vec![0u8; batch * D_BYTES];

    let mut seed = 1u64;
    let warm_values: Vec<u64> = (0..WARM_ROWS).map(|_| splitmix(&mut seed)).collect();
    let mut warm = Index::new(D_BYTES, K);
    warm.add_batch(&rows_of(&warm_values));
    drop(warm);
    drop(warm_values);
    let baseline = status("VmRSS")?;

    let mut index = Index::new(D_BYTES, K);
    let began = Instant::now();
    let mut done = 0usize;
    while done < n {
        let m = batch.min(n - done);
        let chunk = &mut buffer[..m * D_BYTES];
        reader.read_exact(chunk).map_err(|e| format!("{path}: {e}"))?;
        index.add_batch(chunk);
        done += m;
    }
    let load_s = began.elapsed().as_secs_f64();
    let rss_load = status("VmRSS")?;
    let hwm_load = status("VmHWM")?;

    let mut hits = Vec::new();
    if let Some(qpath) = queries {
        for q in read_u64s(qpath)? {
            let found: Vec<String> = index
                .query(&q.to_le_bytes())
                .iter()
                .map(|(id, d)| format!("[{id},{d}]"))
                .collect();
            hits.push(format!("[{}]", found.join(",")));
        }
    }
    Ok(format!(
        "{{\"n\":{n},\"batch\":{batch},\"len\":{},\"load_s\":{load_s},\
         \"baseline_rss_bytes\":{baseline},\"rss_load_bytes\":{rss_load},\
         \"hwm_load_bytes\":{hwm_load},\"hits\":[{}]}}",
        index.len(),
        hits.join(",")
    ))
}

fn selftest() -> Result<bool, String> {
    let mut state = 43u64;
    let mut values: Vec<u64> = (0..20_000).map(|_| splitmix(&mut state)).collect();
    for i in 0..60u64 {
        let source = values[(i * 97) as usize];
        values.push(flip(source, (i % 6) as u32, &mut state));
    }
    let mut index = Index::new(D_BYTES, K);
    for chunk in values.chunks(1_000) {
        index.add_batch(&rows_of(chunk));
    }
    if index.len() != values.len() {
        return Err(format!("{} rows added, len() says {}", values.len(), index.len()));
    }
    let mut queries: Vec<u64> = values[20_000..].to_vec();
    for i in 0..240u64 {
        let source = values[(splitmix(&mut state) % 20_000) as usize];
        queries.push(flip(source, (i % 6) as u32, &mut state));
    }
    queries.extend((0..100).map(|_| splitmix(&mut state)));
    let (mut wrong, mut pairs) = (0usize, 0usize);
    for &q in &queries {
        let want: BTreeSet<(u32, u32)> = values
            .iter()
            .enumerate()
            .map(|(row, &v)| (row as u32, (v ^ q).count_ones()))
            .filter(|&(_, d)| d <= K)
            .collect();
        let got: BTreeSet<(u32, u32)> = index.query(&q.to_le_bytes()).into_iter().collect();
        pairs += want.len();
        wrong += usize::from(got != want);
    }
    println!(
        "selftest: {} rows, {} queries, {pairs} (row, distance) answers expected, {wrong} \
         queries answered differently from brute force",
        values.len(),
        queries.len()
    );
    Ok(wrong == 0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: hammingbird-harness load FINGERPRINTS BATCH [QUERIES] | selftest";
    let outcome = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["load", path, batch, rest @ ..] if rest.len() <= 1 => batch
            .parse::<usize>()
            .map_err(|_| format!("BATCH must be a positive integer, not {batch:?}"))
            .and_then(|b| load(path, b, rest.first().copied()))
            .map(|line| {
                println!("{line}");
                true
            }),
        ["selftest"] => selftest(),
        _ => Err(usage.to_string()),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("hammingbird-harness: {message}");
            ExitCode::from(2)
        }
    }
}
