// emu.h — runs kvsim-gpu's CUDA kernels on the host, one std::thread per CUDA thread.
//
// Used only by tests/it/emu.rs, which compiles harness.cpp with -DKVSIM_EMU to check the
// kernels' indexing, warp shuffles and merges against the CPU reference on machines
// without a GPU. Blocks run one after another; the threads of a block run concurrently,
// so __shared__ arrays can be function statics. __syncthreads is a block barrier and
// __shfl_xor_sync a warp barrier around an exchange slot. This checks logic, not
// timing or memory-model corner cases.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned int x, y;
};

namespace emu {
inline thread_local dim3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;

struct Warp {
    std::barrier<> bar{32};
    float slot[32];
};
inline std::unique_ptr<std::barrier<>> block_barrier;
inline std::vector<std::unique_ptr<Warp>> warps;

// Runs `kernel` over the grid.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    const unsigned int n = block.x * block.y * block.z;
    grid_dim = grid;
    block_dim = block;
    for (unsigned int z = 0; z < grid.z; ++z)
        for (unsigned int y = 0; y < grid.y; ++y)
            for (unsigned int x = 0; x < grid.x; ++x) {
                block_barrier = std::make_unique<std::barrier<>>(n);
                warps.clear();
                for (unsigned int w = 0; w < (n + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>());
                std::vector<std::thread> threads;
                for (unsigned int t = 0; t < n; ++t)
                    threads.emplace_back([&, t, x, y, z] {
                        thread_idx = dim3{t, 0, 0};
                        block_idx = dim3{x, y, z};
                        kernel();
                    });
                for (auto& th : threads) th.join();
            }
}
}  // namespace emu

#define threadIdx (emu::thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned int, float v, int off) {
    const unsigned int lane = threadIdx.x & 31;
    emu::Warp& w = *emu::warps[threadIdx.x >> 5];
    w.slot[lane] = v;
    w.bar.arrive_and_wait();
    const float r = w.slot[lane ^ (unsigned int)off];
    w.bar.arrive_and_wait();
    return r;
}

inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline float __uint_as_float(unsigned int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int i;
    std::memcpy(&i, &f, 4);
    return i;
}
inline float __expf(float x) { return std::exp(x); }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }

inline float emu_f16_to_f32(unsigned short x) {
    _Float16 h;
    std::memcpy(&h, &x, 2);
    return (float)h;
}
inline unsigned short emu_f32_to_f16(float f) {
    const _Float16 h = (_Float16)f;
    unsigned short x;
    std::memcpy(&x, &h, 2);
    return x;
}
