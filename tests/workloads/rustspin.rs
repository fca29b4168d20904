// SPDX-License-Identifier: MIT
// Demangling of Rust names: spins in mycrate::module::func (build with --crate-name mycrate,
// -C debuginfo=2 -C opt-level=1). Usage: rustspin SECONDS
use std::time::{Duration, Instant};

mod module {
    #[inline(never)]
    pub fn func(mut x: u64) -> u64 {
        for _ in 0..200_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
        x ^ (x >> 17)
    }
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut x: u64 = 1;
    while Instant::now() < until {
        x = module::func(x);
    }
    std::hint::black_box(x);
}
