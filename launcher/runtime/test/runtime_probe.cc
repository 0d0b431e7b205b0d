// Test helper: a rank that uses libomni through its C API only (omni/omni.h), for the
// integration test under `srun --mpi=pmix`. It trains nothing: each step it checks the
// communicator (allreduce of rank+1 must be world*(world+1)/2), and after every reshape that
// its optimizer shard is the logical vector x[i] = i/2 sliced by the documented ZeRO-1 rule.
// Prints one line per event; exits 0 after STOP or LEFT, 1 on any failure.
#include <cstdio>
#include <vector>

#include "omni/omni.h"

namespace {

constexpr size_t kP = 1001;

int die(const char *what) {
    std::printf("probe: FAIL %s: %s\n", what, omni_last_error());
    std::fflush(stdout);
    omni_finalize();
    return 1;
}

// The documented partition: q = L / w, e = L % w; rank r starts at r*q + min(r, e).
bool shard_is_slice(uint32_t rank, uint32_t world) {
    float *data = nullptr;
    size_t begin = 0, count = 0;
    if (omni_state_shard(0, &data, &begin, &count) != OMNI_OK) return false;
    const size_t q = kP / world, e = kP % world;
    const size_t want_begin = rank * q + (rank < e ? rank : e);
    const size_t want_count = q + (rank < e ? 1 : 0);
    if (begin != want_begin || count != want_count) return false;
    for (size_t j = 0; j < count; ++j)
        if (data[j] != 0.5f * float(begin + j)) return false;
    return true;
}

}  // namespace

int main() {
    if (omni_init() != OMNI_OK) return die("omni_init");
    uint32_t rank = 0, world = 0, unit = 0, slot = 0;
    omni_rank(&rank);
    omni_world_size(&world);
    omni_unit(&unit, &slot);
    std::vector<float> params(kP, 1.0f);
    size_t idx = 0;
    if (omni_register_params(params.data(), kP) != OMNI_OK) return die("omni_register_params");
    if (omni_state_add(kP, &idx) != OMNI_OK) return die("omni_state_add");
    {
        float *data = nullptr;
        size_t begin = 0, count = 0;
        omni_state_shard(idx, &data, &begin, &count);
        for (size_t j = 0; j < count; ++j) data[j] = 0.5f * float(begin + j);
    }
    if (omni_data_configure(1000, 1, 12, 1) != OMNI_OK) return die("omni_data_configure");
    uint64_t step = 0;
    if (omni_start(&step, nullptr) != OMNI_OK) return die("omni_start");
    std::printf("probe: unit %u slot %u rank %u of %u backend %s\n", unit, slot, rank, world,
                omni_backend());
    for (int i = 0; i < 500; ++i) {
        float x = float(rank + 1);
        if (omni_allreduce(&x, 1, OMNI_FP32, OMNI_SUM) != OMNI_OK) return die("omni_allreduce");
        if (x != float(world * (world + 1) / 2)) {
            std::printf("probe: FAIL unit %u allreduce %g in world %u\n", unit, x, world);
            return 1;
        }
        omni_decision d;
        if (omni_boundary(++step, &d) != OMNI_OK) return die("omni_boundary");
        if (d.kind == OMNI_CONTINUE) continue;
        const char *kind = d.kind == OMNI_RESHAPED ? "reshaped"
                           : d.kind == OMNI_STOP   ? "stop"
                           : d.kind == OMNI_LEFT   ? "left"
                                                   : "rewind";
        const bool ok = d.kind != OMNI_RESHAPED || shard_is_slice(d.rank, d.world);
        std::printf("probe: unit %u step %llu %s world %u rank %u ga %u shard %s\n", unit,
                    static_cast<unsigned long long>(step), kind, d.world, d.rank, d.grad_accum,
                    ok ? "ok" : "WRONG");
        std::fflush(stdout);
        if (!ok || d.kind == OMNI_REWIND) return 1;
        if (d.kind == OMNI_STOP || d.kind == OMNI_LEFT) {
            omni_finalize();
            return 0;
        }
        rank = d.rank;
        world = d.world;
    }
    std::printf("probe: FAIL no STOP after 500 steps\n");
    return 1;
}
