//! Device kernels of kmeans-knn and the plain math they share with the host.
//!
//! On `nvptx64-nvidia-cuda` this crate is `no_std` and its `extern "gpu-kernel"` functions become
//! PTX entry points (`cargo xtask ptx`). On every other target only the shared modules are
//! compiled, so the host's CPU backend uses the very same distance steps, tie-break order and
//! fixed-point arithmetic as the GPU, which is what makes the two backends agree bit for bit.
//!
//! # Kernels and their twins
//!
//! Every kernel, the module it lives in, its parameter struct (whose fields are the entry's
//! parameters, which the host fills by field name, see [`params`]), its CPU twin (in
//! `kmeans_knn`'s `backend/cpu`) and the test that holds the two to the same answer. [`KERNELS`]
//! lists the same kernels with their structs' fields; a host test checks both against the
//! committed PTX.
//!
//! | kernel | module | parameters | CPU twin | test |
//! |---|---|---|---|---|
//! | `kmeans_assign_l2_wide` | `assign` | `assign::AssignParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `assign.rs` `emulated_assign_matches_the_cpu` (the sm_70 sweep) |
//! | `kmeans_assign_l2_narrow` | `assign` | `assign::AssignParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `assign.rs` `emulated_assign_matches_the_cpu` (the sm_70 sweep) |
//! | `kmeans_assign_l1_wide` | `assign` | `assign::AssignParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `assign.rs` `emulated_assign_matches_the_cpu` (the sm_70 sweep) |
//! | `kmeans_assign_l1_narrow` | `assign` | `assign::AssignParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `assign.rs` `emulated_assign_matches_the_cpu` (the sm_70 sweep) |
//! | `kmeans_assign_l2_tf32` | `assign_tf32` | `assign_tf32::AssignTf32Params` | `backend::cpu::kmeans::nearest` (exact) | `tests/kmeans_tf32.rs` `tf32_labels_equal_exact` `tf32_fits_equal_exact`, `assign_tf32/shortlist/tests.rs` `near_tie_lattices_are_exact`, `assign_tf32/emulated.rs` `emulated_tf32_assign_equals_the_exact_path` |
//! | `kmeans_assign_l2_tf32_wg` | `assign_tf32::sweep_wgmma` | `assign_tf32::AssignTf32Params` | `backend::cpu::kmeans::nearest` (exact) | `tests/kmeans_tf32.rs` `tf32_labels_equal_exact` `sanitize_kmeans_tf32` (sm_90) |
//! | `kmeans_assign_l2_full_pass` | `assign_tf32::full_pass` | `assign_tf32::full_pass::FullPassParams` | `backend::cpu::kmeans::nearest` (exact) | `tests/kmeans_tf32.rs` `tf32_labels_equal_exact` `sanitize_kmeans_tf32`, `assign_tf32/emulated.rs` `emulated_tf32_assign_equals_the_exact_path` |
//! | `tf32_tile_maxima` | `assign_tf32::bound` | `assign_tf32::bound::TileMaximaParams` | `assign_tf32::bound::tile_maxima_of` | `assign_tf32/bound.rs` `emulated_tile_maxima_equal_the_twin`, `tests/kmeans_tf32.rs` `tf32_labels_equal_exact` |
//! | `kmeans_centroids_by_dimension` | `centroids` | `centroids::CentroidsByDimensionParams` | `backend::cpu::kmeans::CentroidBlocks::new` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `centroids.rs` `emulated_layout_is_the_transpose_with_the_twins_norms` |
//! | `kmeans_accumulate_shared` | `update` | `update::AccumulateSharedParams` | `backend::cpu::kmeans::accumulate` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `update/tests.rs` `emulated_update_steps_equal_the_twins` |
//! | `kmeans_accumulate_global` | `update` | `update::AccumulateGlobalParams` | `backend::cpu::kmeans::accumulate` | `tests/weights.rs` `gpu_matches_cpu_with_weights`, `update/tests.rs` `emulated_update_steps_equal_the_twins` |
//! | `kmeans_accumulate_sorted` | `update::sorted` | `update::sorted::AccumulateSortedParams` | `backend::cpu::kmeans::accumulate` | `tests/kmeans_tf32.rs` `update_sums_equal_the_cpu`, `update/tests.rs` `emulated_sorted_sums_equal_the_twin` |
//! | `kmeans_accumulate_columns` | `update::columns` | `update::columns::AccumulateColumnsParams` | `backend::cpu::kmeans::accumulate` | `tests/kmeans_tf32.rs` `update_sums_equal_the_cpu`, `update/tests.rs` `emulated_column_sums_equal_the_twin` |
//! | `kmeans_finalize` | `update` | `update::FinalizeParams` | `backend::cpu::partial::Partial::finish` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `update/tests.rs` `emulated_update_steps_equal_the_twins` |
//! | `kmeans_normalize_rows` | `update` | `update::NormalizeRowsParams` | `math::normalize` in `Partial::finish` | `tests/cosine.rs` `gpu_matches_cpu_for_cosine`, `update/tests.rs` `emulated_update_steps_equal_the_twins` |
//! | `kmeans_shift_parts` | `reduce` | `reduce::ShiftPartsParams` | `backend::cpu::partial::squared_shift` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `reduce.rs` `emulated_shift_and_summary_equal_the_twins` |
//! | `kmeans_summary` | `reduce` | `reduce::SummaryParams` | `backend::cpu::kmeans::CpuLloyd::total` | `tests/kmeans.rs` `gpu_matches_cpu_on_awkward_shapes`, `reduce.rs` `emulated_shift_and_summary_equal_the_twins` |
//! | `kmeans_small_l2_0` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l2_1` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l2_2` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l2_3` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l1_0` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l1_1` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l1_2` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_small_l1_3` | `small` | `small::SmallParams` | `backend::cpu::kmeans::nearest`, `::accumulate` | `small/tests.rs` `emulated_small_step_matches_the_cpu` |
//! | `kmeans_finalize_small` | `small` | `small::FinalizeSmallParams` | `Partial::finish`, `CpuLloyd::total`; the halt rule: the Lloyd loop (`kmeans::lloyd::run_once`) | `tests/kmeans.rs` `gpu_matches_cpu_on_seed_000_shape`, `tests/queued.rs` `queued_steps_stop_where_single_steps_do`, `small/tests.rs` |
//! | `kmeans_minibatch_assign_l2` | `minibatch` | `minibatch::MinibatchAssignParams` | `backend::cpu::minibatch::assign_rows` | `minibatch/tests.rs` `emulated_batch_step_matches_the_formulas` |
//! | `kmeans_minibatch_assign_l1` | `minibatch` | `minibatch::MinibatchAssignParams` | `backend::cpu::minibatch::assign_rows` | `minibatch/tests.rs` `emulated_batch_step_matches_the_formulas` |
//! | `kmeans_minibatch_update` | `minibatch` | `minibatch::MinibatchUpdateParams` | `backend::cpu::minibatch::update_row` | `minibatch/tests.rs` `the_update_is_the_running_mean` |
//! | `kmeans_minibatch_shift` | `minibatch` | `minibatch::MinibatchShiftParams` | `backend::cpu::minibatch::CpuMiniBatch::shifts` | `tests/minibatch.rs` `gpu_minibatch_matches_cpu_on_an_embedding_shape` |
//! | `row_sq_norms` | `norms` | `norms::RowSqNormsParams` | `backend::cpu::kmeans::row_sq_norms` | `tests/knn.rs` `gpu_pairwise_matches_cpu`, `norms.rs` `emulated_norms_and_roots_equal_the_twins` |
//! | `row_norm_roots` | `norms` | `norms::RowNormRootsParams` | `math::sqrt` | `tests/knn.rs` `gpu_prefilter_matches_cpu`, `norms.rs` `emulated_norms_and_roots_equal_the_twins` |
//! | `pairwise_dot` | `distance` | `distance::PairwiseParams` | `backend::cpu::knn::panel_distances` | `distance.rs` `emulated_tiles_match_the_formula` |
//! | `pairwise_l1` | `distance` | `distance::PairwiseParams` | `backend::cpu::knn::panel_distances` | `distance.rs` `emulated_tiles_match_the_formula` |
//! | `pairwise_chebyshev` | `lp` | `lp::ChebyshevParams` | `backend::cpu::knn::panel_distances` | `lp.rs` `emulated_tiles_match_the_plain_distance`, `tests/lp.rs` `gpu_lp_matches_cpu` |
//! | `pairwise_minkowski` | `lp` | `lp::MinkowskiParams` | `backend::cpu::knn::panel_distances` | `lp.rs` `emulated_tiles_match_the_plain_distance`, `tests/lp.rs` `gpu_lp_matches_cpu` |
//! | `knn_select_kmin` | `select` | `select::SelectParams` | `backend::cpu::knn::Nearest::offer` | `select.rs` `emulated_streaming_selection_keeps_the_k_smallest` |
//! | `knn_select_bitonic` | `select` | `select::SelectParams` | `backend::cpu::knn::Nearest::offer` | `select.rs` `emulated_streaming_selection_keeps_the_k_smallest` |
//! | `knn_select_radix` | `select` (`radix`) | `select::SelectParams` | `backend::cpu::knn::Nearest::offer` | `select.rs` `emulated_streaming_selection_keeps_the_k_smallest`, `radix.rs` `the_k_smallest_of_awkward_sets` |
//! | `knn_select_keys_kmin` | `select` | `select::SelectKeysParams` | `backend::cpu::knn::Nearest::offer` | `tests/knn.rs` `gpu_prefilter_matches_cpu`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` |
//! | `knn_select_keys_bitonic` | `select` | `select::SelectKeysParams` | `backend::cpu::knn::Nearest::offer` | `tests/knn.rs` `gpu_prefilter_matches_cpu`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` |
//! | `knn_select_keys_radix` | `select` (`radix`) | `select::SelectKeysParams` | `backend::cpu::knn::Nearest::offer` | `tests/knn.rs` `gpu_prefilter_matches_cpu`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` |
//! | `knn_sort_chunks` | `select` | `select::SortChunksParams` | `backend::cpu::knn::Nearest::finish` | `select.rs` `emulated_row_sort_keeps_the_k_smallest` |
//! | `knn_bitonic_merge_global` | `select` | `select::MergeGlobalParams` | `backend::cpu::knn::Nearest::finish` | `select.rs` `emulated_row_sort_keeps_the_k_smallest` |
//! | `knn_bitonic_merge_local` | `select` | `select::MergeLocalParams` | `backend::cpu::knn::Nearest::finish` | `select.rs` `emulated_row_sort_keeps_the_k_smallest` |
//! | `knn_take` | `select` | `select::TakeParams` | `backend::cpu::knn::Nearest::finish` | `select.rs` `emulated_row_sort_keeps_the_k_smallest` |
//! | `knn_tf32_threshold` | `knn_tf32` | `knn_tf32::ThresholdParams` | `backend::cpu::knn::CpuKnn::nearest` (exact) | `knn_tf32.rs` `emulated_threshold_and_rerank`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` |
//! | `knn_tf32_rerank` | `knn_tf32` | `knn_tf32::RerankParams` | `backend::cpu::knn::CpuKnn::nearest` (exact) | `knn_tf32.rs` `emulated_threshold_and_rerank`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` |
//! | `knn_tf32_scan` | `knn_tf32::scan` | `knn_tf32::ScanParams` | `backend::cpu::knn::CpuKnn::nearest` (exact) | `tests/knn.rs` `gpu_prefilter_matches_cpu`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` `emulated_scan_over_query_tiles_and_dimension_slices` |
//! | `knn_tf32_scan_wg` | `knn_tf32::scan_wgmma` | `knn_tf32::ScanParams` | `backend::cpu::knn::CpuKnn::nearest` (exact) | `tests/knn.rs` `gpu_prefilter_matches_cpu` (sm_90) |
//! | `knn_tf32_candidates` | `knn_tf32::candidates` | `knn_tf32::candidates::CandidatesParams` | `backend::cpu::knn::CpuKnn::nearest` (exact) | `candidates.rs` `emulated_candidates`, `tests/knn.rs` `gpu_prefilter_matches_cpu`, `knn_tf32/scan/emulated.rs` `emulated_prefilter_equals_the_exact_search` |
//! | `knn_radius_count` | `radius` | `radius::RadiusCountParams` | `backend::cpu::knn::radius` (`CpuKnn::radius_keys`) | `radius.rs` `emulated_count_and_fill_find_every_row_within_the_radius`, `tests/radius.rs` `gpu_radius_matches_cpu` |
//! | `knn_radius_fill` | `radius` | `radius::RadiusFillParams` | `backend::cpu::knn::radius` (`CpuKnn::radius_keys`) | `radius.rs` `emulated_count_and_fill_find_every_row_within_the_radius`, `tests/radius.rs` `gpu_radius_matches_cpu` |
//! | `knn_radius_tf32_count` | `radius::candidates` | `radius::candidates::RadiusTf32CountParams` | `backend::cpu::knn::radius` (`CpuKnn::radius_keys`) | `radius/candidates.rs` `emulated_candidates_give_every_row_within_the_radius`, `tests/radius.rs` `gpu_radius_prefilter_matches_exact_and_cpu` |
//! | `knn_radius_tf32_fill` | `radius::candidates` | `radius::candidates::RadiusTf32FillParams` | `backend::cpu::knn::radius` (`CpuKnn::radius_keys`) | `radius/candidates.rs` `emulated_candidates_give_every_row_within_the_radius`, `tests/radius.rs` `gpu_radius_prefilter_matches_exact_and_cpu` |
//! | `knn_vote` | `vote` | `vote::VoteParams` | `backend::cpu::vote::knn_vote` | `vote.rs` `emulated_votes_match_the_reference` |
//! | `seed_nearest_l2` | `init` | `init::NearestParams` | `backend::cpu::init::Seeder::seed_nearest` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_nearest_pass_sums_match_the_twin` |
//! | `seed_trials_l2` | `init` | `init::TrialsParams` | `backend::cpu::init::Seeder::seed_trials` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_trials_match_the_twin` |
//! | `seed_locate_l2` | `init` | `init::LocateParams` | `backend::cpu::init::Seeder::locate_all` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_locate_finds_the_first_point_past_each_draw` |
//! | `seed_sample_l2` | `init` | `init::SampleParams` | `backend::cpu::init::Seeder::seed_sample` | `tests/init.rs` `kmeans_parallel_is_as_good_as_kmeans_plus_plus_on_blobs`, `init/emulated.rs` `emulated_sampling_and_owner_weights_match_the_twin` |
//! | `seed_nearest_l1` | `init` | `init::NearestParams` | `backend::cpu::init::Seeder::seed_nearest` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_nearest_pass_sums_match_the_twin` |
//! | `seed_trials_l1` | `init` | `init::TrialsParams` | `backend::cpu::init::Seeder::seed_trials` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_trials_match_the_twin` |
//! | `seed_locate_l1` | `init` | `init::LocateParams` | `backend::cpu::init::Seeder::locate_all` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_locate_finds_the_first_point_past_each_draw` |
//! | `seed_sample_l1` | `init` | `init::SampleParams` | `backend::cpu::init::Seeder::seed_sample` | `tests/init.rs` `kmeans_parallel_is_as_good_as_kmeans_plus_plus_on_blobs`, `init/emulated.rs` `emulated_sampling_and_owner_weights_match_the_twin` |
//! | `seed_greedy_draw_l2` | `init` | `init::GreedyDrawParams` | `backend::greedy_steps` over `backend::cpu::init::Seeder` | `host/src/kmeans/init.rs` `gpu_greedy_loop_matches_step_by_step`, `init/emulated.rs` `emulated_greedy_steps_match_the_host_step` |
//! | `seed_greedy_draw_l1` | `init` | `init::GreedyDrawParams` | `backend::greedy_steps` over `backend::cpu::init::Seeder` | `host/src/kmeans/init.rs` `gpu_greedy_loop_matches_step_by_step`, `init/emulated.rs` `emulated_greedy_steps_match_the_host_step` |
//! | `seed_owner_weights` | `init` | `init::OwnerWeightsParams` | `backend::cpu::init::Seeder::seed_owner_weights` | `tests/init.rs` `gpu_seeding_matches_cpu`, `init/emulated.rs` `emulated_sampling_and_owner_weights_match_the_twin` |
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_gpu_kernel,
        stdarch_nvptx,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem,
        core_float_math,
        core_intrinsics,
        // Inline PTX: `cvt.rni` in `fixed`, and `mma`, `cvt.rna.tf32`, `shfl`, `cp.async` in
        // the sm_80 build's tensor-core kernels.
        asm_experimental_arch
    )
)]

// First, so that every module sees `kernel_params!`.
#[macro_use]
pub mod params;

pub mod assign;
pub mod assign_tf32;
pub mod bitonic;
pub mod centroids;
pub mod distance;
pub mod exec;
pub mod fixed;
pub mod init;
pub mod knn;
pub mod knn_tf32;
pub mod launch;
pub mod lp;
pub mod lp_distance;
pub mod math;
pub mod minibatch;
pub mod norms;
pub mod powers;
pub mod radius;
pub mod radix;
pub mod reduce;
pub mod seeding;
pub mod select;
pub mod small;
pub mod tile;
pub mod update;
pub mod vote;

use launch::Kernel;

/// Every kernel of the PTX builds, in the order of the twin table above.
pub const KERNELS: [Kernel; 67] = [
    assign::KMEANS_ASSIGN_L2_WIDE.erased(),
    assign::KMEANS_ASSIGN_L2_NARROW.erased(),
    assign::KMEANS_ASSIGN_L1_WIDE.erased(),
    assign::KMEANS_ASSIGN_L1_NARROW.erased(),
    assign_tf32::KMEANS_ASSIGN_L2_TF32.erased(),
    assign_tf32::KMEANS_ASSIGN_L2_TF32_WG.erased(),
    assign_tf32::full_pass::KMEANS_ASSIGN_L2_FULL_PASS.erased(),
    assign_tf32::bound::TF32_TILE_MAXIMA.erased(),
    centroids::KMEANS_CENTROIDS_BY_DIMENSION.erased(),
    update::KMEANS_ACCUMULATE_SHARED.erased(),
    update::KMEANS_ACCUMULATE_GLOBAL.erased(),
    update::sorted::KMEANS_ACCUMULATE_SORTED.erased(),
    update::columns::KMEANS_ACCUMULATE_COLUMNS.erased(),
    update::KMEANS_FINALIZE.erased(),
    update::KMEANS_NORMALIZE_ROWS.erased(),
    reduce::KMEANS_SHIFT_PARTS.erased(),
    reduce::KMEANS_SUMMARY.erased(),
    small::KMEANS_SMALL_L2_0.erased(),
    small::KMEANS_SMALL_L2_1.erased(),
    small::KMEANS_SMALL_L2_2.erased(),
    small::KMEANS_SMALL_L2_3.erased(),
    small::KMEANS_SMALL_L1_0.erased(),
    small::KMEANS_SMALL_L1_1.erased(),
    small::KMEANS_SMALL_L1_2.erased(),
    small::KMEANS_SMALL_L1_3.erased(),
    small::KMEANS_FINALIZE_SMALL.erased(),
    minibatch::KMEANS_MINIBATCH_ASSIGN_L2.erased(),
    minibatch::KMEANS_MINIBATCH_ASSIGN_L1.erased(),
    minibatch::KMEANS_MINIBATCH_UPDATE.erased(),
    minibatch::KMEANS_MINIBATCH_SHIFT.erased(),
    norms::ROW_SQ_NORMS.erased(),
    norms::ROW_NORM_ROOTS.erased(),
    distance::PAIRWISE_DOT.erased(),
    distance::PAIRWISE_L1.erased(),
    lp::PAIRWISE_CHEBYSHEV.erased(),
    lp::PAIRWISE_MINKOWSKI.erased(),
    select::KNN_SELECT_KMIN.erased(),
    select::KNN_SELECT_BITONIC.erased(),
    select::KNN_SELECT_RADIX.erased(),
    select::KNN_SELECT_KEYS_KMIN.erased(),
    select::KNN_SELECT_KEYS_BITONIC.erased(),
    select::KNN_SELECT_KEYS_RADIX.erased(),
    select::KNN_SORT_CHUNKS.erased(),
    select::KNN_BITONIC_MERGE_GLOBAL.erased(),
    select::KNN_BITONIC_MERGE_LOCAL.erased(),
    select::KNN_TAKE.erased(),
    knn_tf32::KNN_TF32_THRESHOLD.erased(),
    knn_tf32::KNN_TF32_RERANK.erased(),
    knn_tf32::KNN_TF32_SCAN.erased(),
    knn_tf32::KNN_TF32_SCAN_WG.erased(),
    knn_tf32::candidates::KNN_TF32_CANDIDATES.erased(),
    radius::KNN_RADIUS_COUNT.erased(),
    radius::KNN_RADIUS_FILL.erased(),
    radius::candidates::KNN_RADIUS_TF32_COUNT.erased(),
    radius::candidates::KNN_RADIUS_TF32_FILL.erased(),
    vote::KNN_VOTE.erased(),
    init::SEED_NEAREST_L2.erased(),
    init::SEED_TRIALS_L2.erased(),
    init::SEED_LOCATE_L2.erased(),
    init::SEED_SAMPLE_L2.erased(),
    init::SEED_NEAREST_L1.erased(),
    init::SEED_TRIALS_L1.erased(),
    init::SEED_LOCATE_L1.erased(),
    init::SEED_SAMPLE_L1.erased(),
    init::SEED_GREEDY_DRAW_L2.erased(),
    init::SEED_GREEDY_DRAW_L1.erased(),
    init::SEED_OWNER_WEIGHTS.erased(),
];

// The tensor-core helpers: on the GPU from sm_80, in the host's tests for the emulator.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
mod cp_async;
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
pub mod mma;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
pub mod wgmma;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: aborts the kernel; nothing runs after it.
    unsafe { core::arch::nvptx::trap() }
}
