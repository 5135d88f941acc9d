//! `cargo xtask …`: project tasks (placeholder, filled by the toolchain work).
fn main() {
    println!("xtask: no tasks yet");
}
