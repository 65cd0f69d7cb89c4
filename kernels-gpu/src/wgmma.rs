//! Inline-PTX helpers of Hopper's warpgroup `mma` (sm_90a): the shared-memory matrix
//! descriptor, the TF32 `wgmma.mma_async` of a 64 × 128 × 8 tile, and its fences.
//!
//! Accumulator layout of [`mma_m64n128k8`] (PTX ISA, `wgmma` D fragments), for warp `w` of the
//! warpgroup and lane `l`, `g = l / 4`, `q = l % 4`: `d[4·j + 2·r + h]` is row `16·w + g + 8·r`,
//! column `8·j + 2·q + h` (`j < 16`, `r, h < 2`).
//!
//! Operands sit in shared memory K-major with the 128-byte swizzle: each row's 128 bytes (32
//! TF32 values of K) hold their 16-byte pieces at position `piece ^ (row % 8)`, in atoms of 8
//! rows (1024 bytes, 1024-byte aligned, as the block's dynamic shared memory starts);
//! [`descriptor_sw128`] describes a slice by its first row's address plus 32 bytes a k step.

use core::arch::asm;

/// `asm!` with the template lines `$line`, then the accumulators `$d[0..64]` as in-out operands
/// `{0}` … `{63}` (`acc!()` lists them), then `$rest` (named operands, options).
macro_rules! asm_with_accumulators {
    ($d:ident, [$($line:expr),* $(,)?], $($rest:tt)*) => {
        asm!($($line,)* inout(reg32) $d[0], inout(reg32) $d[1], inout(reg32) $d[2], inout(reg32) $d[3], inout(reg32) $d[4], inout(reg32) $d[5], inout(reg32) $d[6], inout(reg32) $d[7], inout(reg32) $d[8], inout(reg32) $d[9], inout(reg32) $d[10], inout(reg32) $d[11], inout(reg32) $d[12], inout(reg32) $d[13], inout(reg32) $d[14], inout(reg32) $d[15], inout(reg32) $d[16], inout(reg32) $d[17], inout(reg32) $d[18], inout(reg32) $d[19], inout(reg32) $d[20], inout(reg32) $d[21], inout(reg32) $d[22], inout(reg32) $d[23], inout(reg32) $d[24], inout(reg32) $d[25], inout(reg32) $d[26], inout(reg32) $d[27], inout(reg32) $d[28], inout(reg32) $d[29], inout(reg32) $d[30], inout(reg32) $d[31], inout(reg32) $d[32], inout(reg32) $d[33], inout(reg32) $d[34], inout(reg32) $d[35], inout(reg32) $d[36], inout(reg32) $d[37], inout(reg32) $d[38], inout(reg32) $d[39], inout(reg32) $d[40], inout(reg32) $d[41], inout(reg32) $d[42], inout(reg32) $d[43], inout(reg32) $d[44], inout(reg32) $d[45], inout(reg32) $d[46], inout(reg32) $d[47], inout(reg32) $d[48], inout(reg32) $d[49], inout(reg32) $d[50], inout(reg32) $d[51], inout(reg32) $d[52], inout(reg32) $d[53], inout(reg32) $d[54], inout(reg32) $d[55], inout(reg32) $d[56], inout(reg32) $d[57], inout(reg32) $d[58], inout(reg32) $d[59], inout(reg32) $d[60], inout(reg32) $d[61], inout(reg32) $d[62], inout(reg32) $d[63], $($rest)*)
    };
}

/// The accumulator operands as a template fragment, for [`asm_with_accumulators`].
macro_rules! acc {
    () => {
        "{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}"
    };
}

/// The matrix descriptor of a K-major operand slice with the 128-byte swizzle at shared address
/// `addr` (16-byte aligned): no leading-dimension offset (a k step stays inside a row), 1024
/// bytes between atoms of 8 rows.
#[inline(always)]
pub fn descriptor_sw128(addr: u32) -> u64 {
    let field = |v: u32| ((v >> 4) & 0x3fff) as u64;
    field(addr) | 1 << 16 | field(1024) << 32 | 1 << 62
}

/// Orders this warpgroup's earlier register accesses (the accumulators `d`) before the next
/// [`mma_m64n128k8`].
#[inline(always)]
pub fn fence(d: &mut [f32; 64]) {
    // SAFETY: no memory operands; `d` is named so that its values are not moved across.
    unsafe {
        asm_with_accumulators!(
            d,
            ["wgmma.fence.sync.aligned;", concat!("// ", acc!())],
            options(nostack)
        )
    };
}

/// `d = a · b` (`accumulate` false) or `d += a · b`: a 64 × 8 TF32 tile of A (descriptor `a`)
/// times an 8 × 128 tile of B (descriptor `b`, K-major), FP32 accumulation, warpgroup-wide and
/// asynchronous: `d` is only valid after [`wait`].
///
/// # Safety
/// The descriptors address shared memory of this block that holds the operands in the layout
/// of the module docs, and nothing writes it until [`wait`] says the product is done.
#[inline(always)]
pub unsafe fn mma_m64n128k8(d: &mut [f32; 64], a: u64, b: u64, accumulate: bool) {
    let scale = accumulate as u32;
    unsafe {
        asm_with_accumulators!(
            d,
            [
                "{{",
                ".reg .pred p;",
                "setp.ne.b32 p, {scale}, 0;",
                concat!(
                    "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {{",
                    acc!(),
                    "}}, {a}, {b}, p, 1, 1;"
                ),
                "}}",
            ],
            a = in(reg64) a,
            b = in(reg64) b,
            scale = in(reg32) scale,
            options(nostack)
        )
    };
}

/// Closes the group of `wgmma`s this warpgroup issued so far.
#[inline(always)]
pub fn commit() {
    // SAFETY: no operands.
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) };
}

/// Waits until at most `N` groups of this warpgroup's `wgmma`s are pending; with `N = 0` the
/// accumulators `d` hold every product (named here so that no read of them moves above).
#[inline(always)]
pub fn wait<const N: usize>(d: &mut [f32; 64]) {
    // SAFETY: no memory operands.
    unsafe {
        asm_with_accumulators!(
            d,
            ["wgmma.wait_group.sync.aligned {n};", concat!("// ", acc!())],
            n = const N,
            options(nostack)
        )
    };
}

/// Makes this thread's generic-proxy writes to shared memory (stores and landed `cp.async`
/// copies) visible to the async proxy that `wgmma` reads through.
#[inline(always)]
pub fn fence_shared_for_async() {
    // SAFETY: no operands.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}
