//! The packed form of state and chunk rows: LZ4 with a size and a CRC-32 (written now), and the
//! earlier forms still read (LZ4 without a checksum, raw deflate). Damage is found on unpack,
//! never parsed into a state.

use super::{StoreError, StoreResult};

/// The first byte of a row in the second form (format 1): an LZ4 block follows, after its size
/// (u32, little endian). No raw deflate stream — format 0, the rows written first — can start
/// with it: its block type bits (1–2) are 11, which deflate reserves. Still read, no longer
/// written.
const LZ4_MARK: u8 = 0x06;

/// The first byte of a row in the current form (format 2): the size (u32), the CRC-32 of the
/// unpacked bytes (u32), then the LZ4 block; damage is found on read, not parsed into a state.
/// (0x07 is, like 0x06, a deflate block type no stream starts with.)
const LZ4_CRC_MARK: u8 = 0x07;

/// Rows larger than this once unpacked are refused as damaged (a state or chunk is kilobytes).
const MAX_UNPACKED: usize = 1 << 30;

/// A state or chunk as the store writes it. LZ4 rather than deflate: a node's state is a few
/// kilobytes written while its run waits for the commit, and LZ4 packs it in microseconds where
/// deflate took tens (with a fresh encoder, hundreds: it allocates and clears its tables).
pub(super) fn pack(bytes: &[u8]) -> Vec<u8> {
    let block = lz4_flex::block::compress(bytes);
    let mut out = Vec::with_capacity(9 + block.len());
    out.push(LZ4_CRC_MARK);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    out.extend_from_slice(&block);
    out
}

/// The inverse of [`pack`]; also reads the rows that earlier versions wrote (LZ4 without a
/// checksum, raw deflate).
pub(super) fn unpack(bytes: &[u8]) -> StoreResult<Vec<u8>> {
    let le = |b: [u8; 4]| u32::from_le_bytes(b);
    let (size, crc, block) = match *bytes {
        [LZ4_CRC_MARK, s0, s1, s2, s3, c0, c1, c2, c3, ref block @ ..] => {
            (le([s0, s1, s2, s3]), Some(le([c0, c1, c2, c3])), block)
        }
        [LZ4_MARK, s0, s1, s2, s3, ref block @ ..] => (le([s0, s1, s2, s3]), None, block),
        [LZ4_MARK | LZ4_CRC_MARK, ..] => return Err(StoreError::Corrupt("corrupt packed data: no size".into())),
        _ => return inflate(bytes),
    };
    let size = size as usize;
    if size > MAX_UNPACKED {
        return Err(StoreError::Corrupt(format!("corrupt packed data: it claims {size} bytes")));
    }
    let out = lz4_flex::block::decompress(block, size)
        .map_err(|e| StoreError::Corrupt(format!("corrupt packed data: {e}")))?;
    match crc {
        Some(crc) if crc32fast::hash(&out) != crc => Err(StoreError::Corrupt("the data fails its checksum".into())),
        _ => Ok(out),
    }
}

/// Raw deflate, as rows were written before [`pack`]; the decompressor is kept per thread and
/// reset between uses (a fresh one allocates its tables each time).
fn inflate(bytes: &[u8]) -> StoreResult<Vec<u8>> {
    thread_local! {
        static DECOMPRESS: std::cell::RefCell<flate2::Decompress> =
            std::cell::RefCell::new(flate2::Decompress::new(false));
    }
    DECOMPRESS.with(|d| {
        let mut d = d.borrow_mut();
        d.reset(false);
        let mut out = Vec::with_capacity(bytes.len() * 4 + 64);
        loop {
            let (read, written) = (d.total_in(), d.total_out());
            let status = d
                .decompress_vec(&bytes[read as usize..], &mut out, flate2::FlushDecompress::None)
                .map_err(|e| StoreError::Corrupt(format!("corrupt compressed data: {e}")))?;
            if status == flate2::Status::StreamEnd {
                return Ok(out);
            }
            if out.len() < out.capacity() && (d.total_in(), d.total_out()) == (read, written) {
                // Room to write and nothing consumed: the stream ends before its last block.
                return Err(StoreError::Corrupt("corrupt compressed data: the stream is cut short".into()));
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity());
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_rows_round_trip_old_deflated_rows_still_read_and_damage_is_refused() {
        use std::io::Write as _;
        let big: Vec<u8> = (0..300_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for input in [b"{\"agents\":[]}".to_vec(), Vec::new(), big.clone(), big] {
            assert_eq!(unpack(&pack(&input)).unwrap(), input);
            // A row from before: raw deflate, read twice (the decompressor is reused).
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&input).unwrap();
            let old = e.finish().unwrap();
            assert_ne!(old.first(), Some(&LZ4_MARK));
            assert_eq!(unpack(&old).unwrap(), input);
            assert_eq!(unpack(&old).unwrap(), input);
        }
        // A row of the first LZ4 form (no checksum) is still read.
        let raw = b"{\"agents\":[1,2,3]}".repeat(50);
        let block = lz4_flex::block::compress(&raw);
        let mut v1 = vec![LZ4_MARK];
        v1.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        v1.extend_from_slice(&block);
        assert_eq!(unpack(&v1).unwrap(), raw);
        // Current rows carry a checksum: a flipped byte anywhere after the mark is an error, never
        // different bytes (a changed match offset may point at the same bytes: no harm).
        let packed = pack(&raw);
        assert_eq!(packed[0], LZ4_CRC_MARK);
        let mut found = 0;
        for at in 1..packed.len() {
            let mut bad = packed.clone();
            bad[at] ^= 0x20;
            match unpack(&bad) {
                Ok(out) => assert_eq!(out, raw, "a flipped byte at {at} gave different bytes"),
                Err(_) => found += 1,
            }
        }
        assert!(found > packed.len() / 2, "{found} of {}", packed.len());
        let packed = pack(&[7u8; 10_000]);
        assert!(unpack(&packed[..packed.len() / 2]).is_err(), "a cut block is an error");
        assert!(unpack(&[LZ4_MARK, 1]).is_err(), "no size");
        assert!(unpack(&[LZ4_CRC_MARK, 1, 0, 0, 0, 1]).is_err(), "no checksum");
        assert!(unpack(&[LZ4_MARK, 0xff, 0xff, 0xff, 0xff, 0]).is_err(), "an absurd size");
        assert!(unpack(&[0xff, 0xff, 0xff]).is_err(), "garbage is an error");
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&[1u8; 10_000]).unwrap();
        let old = e.finish().unwrap();
        assert!(unpack(&old[..old.len() / 2]).is_err(), "a cut deflate stream is an error");
        assert_eq!(unpack(&pack(b"after errors")).unwrap(), b"after errors");
    }
}
