//! The part of rustc-hash 2's API that hammingbird-core uses, over rustc-hash 1.1.

use std::hash::BuildHasher;

pub use rustc_hash_1::{FxHashMap, FxHashSet, FxHasher};

/// rustc-hash 2's unit-struct builder of [`FxHasher`]s.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxBuildHasher;

impl BuildHasher for FxBuildHasher {
    type Hasher = FxHasher;

    fn build_hasher(&self) -> FxHasher {
        FxHasher::default()
    }
}
