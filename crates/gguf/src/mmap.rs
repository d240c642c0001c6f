//! The workspace's one memory-map call: mapping a model file read-only.
//! Other crates (the safetensors reader of the converter) map files through it
//! too, so `unsafe` for mmap exists in exactly one place.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::path::Path;

/// Maps a whole file read-only.
pub fn map_read_only(path: &Path) -> io::Result<memmap2::Mmap> {
    let file = File::open(path)?;
    // SAFETY: the map is read-only and private to this process. Rust's
    // aliasing rules would be broken only if another process truncated or
    // rewrote the file while it is mapped; model files are treated as
    // immutable while in use, as every mmap-based model loader does. All
    // reads from the map go through the bounds-checked parser.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    // Ask for 2 MiB pages (a hint; refused quietly where unsupported). Where
    // the page cache reads the file in fresh, Linux then keeps it in
    // PMD-sized folios and maps them whole, so a token's walk over the
    // weights spares a page walk every 4 KiB.
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    Ok(map)
}

/// Reads a whole file into anonymous memory advised into 2 MiB pages, as a
/// read-only [`memmap2::Mmap`]. The advice above takes only where the page
/// cache reads the file in fresh: a file written or read before (just
/// downloaded, say) stays in 4 KiB pages however it is mapped, and token
/// generation, which streams every weight once a token, then pays a TLB
/// walk every 4 KiB. A copy costs the file's size in anonymous memory and
/// one read at start.
pub fn read_into_memory(path: &Path) -> io::Result<memmap2::Mmap> {
    use std::io::Read;
    let mut file = File::open(path)?;
    let len = usize::try_from(file.metadata()?.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file larger than memory"))?;
    let mut map = memmap2::MmapMut::map_anon(len)?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    file.read_exact(&mut map)?;
    map.make_read_only()
}

/// `len` bytes of zeroed anonymous memory advised into 2 MiB pages, for
/// data a loader derives from a file (weights rewritten into another
/// layout) that is streamed as the file's tensors are.
pub fn anonymous(len: usize) -> io::Result<memmap2::MmapMut> {
    let map = memmap2::MmapMut::map_anon(len.max(1))?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    Ok(map)
}

/// Takes this process's pages of `len` bytes at `offset` of a read-only
/// *file* mapping ([`map_read_only`]) out of its resident set: the page
/// cache keeps them, and a later read maps them back in, the same bytes.
/// For a loader that has copied that part of the file into another layout.
pub(crate) fn release_file_pages(map: &memmap2::Mmap, offset: usize, len: usize) -> io::Result<()> {
    // SAFETY: `MADV_DONTNEED` only unmaps pages: on a read-only shared file
    // mapping (the only kind the caller passes, see `Gguf::release`) the next
    // access faults the same file bytes back in, so no reader can observe a
    // change (the immutable-file assumption of `map_read_only` still holds).
    // memmap2 checks the range against the map and widens it to whole pages
    // (the widened part is released the same harmless way).
    unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) }
}
