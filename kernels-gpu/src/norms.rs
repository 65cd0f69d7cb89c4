//! Squared row norms, the `‖x‖²` and `‖c‖²` of the GEMM form of squared L2.

use crate::gpu;
use crate::math::fma;

/// `out[i] = Σ_j x[i][j]²` over the `n` rows of row-major `x` (`d` columns), in dimension order.
///
/// # Safety
/// `x` holds `n × d` values and `out` `n`; one thread per row.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn row_sq_norms(x: *const f32, n: u32, d: u32, out: *mut f32) {
    let i = gpu::block() * gpu::block_dim() + gpu::thread();
    if i < n as usize {
        let d = d as usize;
        let mut acc = 0.0;
        for j in 0..d {
            let v = unsafe { *x.add(i * d + j) };
            acc = fma(v, v, acc);
        }
        unsafe { *out.add(i) = acc };
    }
}
