//! Thread-pool engine (work in progress).
