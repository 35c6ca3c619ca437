//! pagestream's examples: short programs a user copies, one scan shape
//! each, beside this file (`cargo run --release -p pagestream-examples
//! --example NAME -- PATH`). Each file's header says what it shows.
