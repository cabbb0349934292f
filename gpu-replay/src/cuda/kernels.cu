// kernels.cu — the CUDA kernels of kvsim-gpu, compiled at run time by NVRTC.
//
// src/cuda/kernels.rs prepends the #defines of one KernelConfig:
//   STORE_F16 | STORE_BF16 | STORE_F32   storage dtype of K and V
//   HD          head_dim                 G     query heads per KV head (GQA group)
//   KVH         kv_heads                 PAGE_SIZE  slots per page
//   VEC         elements per vector load VBYTES     VEC * sizeof(store_t) (2, 4, 8 or 16)
//   LPT         lanes per token (a power of two <= 32)
//   NW          warps per block          MINB  blocks per SM __launch_bounds__ must allow
//   UNROLL      tokens in flight per lane group
// The partition length (flash-decoding split) is a kernel argument, chosen on the host from
// the SM count and the read's length (kernels.rs `split`).
//
// Layout of a pool (K and V alike): [page][slot in page][kv head][head dim], so slot s of
// KV head g starts at element (s * KVH + g) * HD.
//
// KVSIM_EMU (tests/emu/emu.h) builds the same source as host C++ to check its logic on
// machines without a GPU; it only swaps the two f16 conversion instructions.
//
// The hash below is a line-for-line copy of src/values.rs (elem_seed, elem_value); the
// arithmetic follows src/cpu.rs (q pre-scaled by 1/sqrt(HD), f32 accumulation, a softmax
// per partition merged by running max).

#define NCHUNK (HD / VEC)
#define CPL ((NCHUNK + LPT - 1) / LPT)
#define TPW (32 / LPT)
#define NGROUPS (NW * TPW)
#define FULL_MASK 0xffffffffu
#define NEG_INF (__int_as_float(0xff800000))
#define RED_THREADS 256

#if defined(STORE_F32)
typedef float store_t;
#else
typedef unsigned short store_t;
#endif

#if VBYTES == 16
typedef uint4 vec_t;
#elif VBYTES == 8
typedef uint2 vec_t;
#elif VBYTES == 4
typedef unsigned int vec_t;
#else
typedef unsigned short vec_t;
#endif

__device__ __forceinline__ float to_f32(store_t x) {
#if defined(STORE_F32)
    return x;
#elif defined(STORE_BF16)
    return __uint_as_float(((unsigned int)x) << 16);
#elif defined(KVSIM_EMU)
    return emu_f16_to_f32(x);  // host emulation (tests/emu/emu.h)
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
#endif
}

__device__ __forceinline__ store_t from_f32(float f) {
#if defined(STORE_F32)
    return f;
#elif defined(STORE_BF16)
    unsigned int u = __float_as_uint(f);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (values are finite)
    return (store_t)(u >> 16);
#elif defined(KVSIM_EMU)
    return emu_f32_to_f16(f);  // host emulation (tests/emu/emu.h)
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// ---- deterministic values (copy of src/values.rs) ----

__device__ __forceinline__ unsigned int rotl32(unsigned int x, int r) {
    return (x << r) | (x >> (32 - r));
}

__device__ __forceinline__ unsigned int fmix32(unsigned int h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

__device__ __forceinline__ unsigned int murmur_step(unsigned int h, unsigned int k) {
    k *= 0xcc9e2d51u;
    k = rotl32(k, 15);
    k *= 0x1b873593u;
    h ^= k;
    h = rotl32(h, 13);
    return h * 5u + 0xe6546b64u;
}

__device__ __forceinline__ unsigned int elem_seed(unsigned int kind, unsigned int tenant,
                                                  unsigned int request, unsigned long long pos,
                                                  unsigned int head) {
    unsigned int h = 0x6b767369u;
    h = murmur_step(h, kind);
    h = murmur_step(h, tenant);
    h = murmur_step(h, request);
    h = murmur_step(h, (unsigned int)pos);
    h = murmur_step(h, (unsigned int)(pos >> 32));
    h = murmur_step(h, head);
    return fmix32(h ^ 24u);
}

__device__ __forceinline__ float elem_value(unsigned int seed, unsigned int dim) {
    const unsigned int x = fmix32(seed ^ ((dim + 1u) * 0x9e3779b9u));
    return (float)((int)(x >> 26) - 32) * (1.0f / 64.0f);
}

// ---- writes: one thread per stored element, K and V ----

extern "C" __global__ void kv_write(store_t* __restrict__ K, store_t* __restrict__ V,
                                    const unsigned long long* __restrict__ slots,
                                    const unsigned long long* __restrict__ pos,
                                    unsigned long long n_tok, unsigned int tenant,
                                    unsigned int request) {
    const unsigned long long per_tok = (unsigned long long)KVH * HD;
    const unsigned long long total = n_tok * per_tok;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < total; i += stride) {
        const unsigned long long t = i / per_tok;
        const unsigned int e = (unsigned int)(i % per_tok);
        const unsigned int g = e / HD;
        const unsigned int d = e % HD;
        const unsigned long long p = pos[t];
        const unsigned long long dst = slots[t] * per_tok + e;
        K[dst] = from_f32(elem_value(elem_seed(0u, tenant, request, p, g), d));
        float v;
        if (d < HD - 3) {
            v = elem_value(elem_seed(1u, tenant, request, p, g), d);
        } else if (d == HD - 3) {
            v = 1.0f;                      // written flag
        } else if (d == HD - 2) {
            v = (float)(tenant >> 8);      // tenant, high base-256 digit
        } else {
            v = (float)(tenant & 0xffu);   // tenant, low base-256 digit
        }
        V[dst] = from_f32(v);
    }
}

// ---- paged decode attention, flash-decoding split ----

__device__ __forceinline__ void convert(const vec_t& raw, float* out) {
    const store_t* e = reinterpret_cast<const store_t*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_f32(e[i]);
}

// Turns the stored reserved dims [flag, hi, lo] of a value into the effective
// [flag, own, foreign] for the reader (src/values.rs effective_reserved).
__device__ __forceinline__ void provenance(const store_t* rsv, int chunk, float* v, float rhi,
                                           float rlo) {
    const float flag = to_f32(rsv[0]);
    const float hi = to_f32(rsv[1]);
    const float lo = to_f32(rsv[2]);
    const bool written = flag == 1.0f;
    const bool own = written && hi == rhi && lo == rlo;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int d = chunk * VEC + i;
        if (d == HD - 2) v[i] = own ? 1.0f : 0.0f;
        if (d == HD - 1) v[i] = (written && !own) ? 1.0f : 0.0f;
    }
}

// Grid (n_parts, KVH); block NW warps; partition p holds tokens [p * part_tokens, ...). A warp holds TPW token groups of LPT lanes; each
// lane group walks its tokens with an online softmax for the G query heads of KV head
// blockIdx.y, then the groups and warps merge. Writes the partition's max, sum and
// unnormalised accumulator per query head.
extern "C" __global__ void __launch_bounds__(NW * 32, MINB)
attn_partial(const store_t* __restrict__ K, const store_t* __restrict__ V,
             const unsigned int* __restrict__ pages, const float* __restrict__ q,
             float* __restrict__ part_m, float* __restrict__ part_l,
             float* __restrict__ part_acc, unsigned int seq_len, unsigned int part_tokens,
             unsigned int reader_tenant, float scale) {
    __shared__ float sm_m[NW][G];
    __shared__ float sm_l[NW][G];
    __shared__ float sm_acc[NW][G][HD];

    const unsigned int part = blockIdx.x;
    const unsigned int g = blockIdx.y;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int sub = lane % LPT;
    const int tg = lane / LPT;
    const float rhi = (float)(reader_tenant >> 8);
    const float rlo = (float)(reader_tenant & 0xffu);

    float qr[G][CPL][VEC];
    float m[G], l[G], acc[G][CPL][VEC];
#pragma unroll
    for (int j = 0; j < G; ++j) {
        m[j] = NEG_INF;
        l[j] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            const int chunk = sub + c * LPT;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                qr[j][c][i] = chunk < NCHUNK ? q[(g * G + j) * HD + chunk * VEC + i] * scale : 0.0f;
                acc[j][c][i] = 0.0f;
            }
        }
    }

    const unsigned int t0 = part * part_tokens;
    const unsigned int t_end = min(t0 + part_tokens, seq_len);
    const unsigned int my = warp * TPW + tg;
    // The slots of the UNROLL tokens of the next iteration. Their page indices are loaded one
    // iteration ahead (software pipelining), so an iteration's K/V loads never wait on a page
    // index load: the first iteration's are loaded here.
    unsigned long long slot[UNROLL];
    bool valid[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const unsigned int t = t0 + u * NGROUPS + my;
        valid[u] = t < t_end;
        slot[u] = valid[u] ? (unsigned long long)pages[t / PAGE_SIZE] * PAGE_SIZE + (t % PAGE_SIZE) : 0ull;
    }
    for (unsigned int base = t0; base < t_end; base += NGROUPS * UNROLL) {
        // 1. Issue every load of the UNROLL tokens before converting any: the K and V vectors
        //    and the stored provenance dims, all in flight together; then the next
        //    iteration's page indices.
        vec_t kraw[UNROLL][CPL];
        vec_t vraw[UNROLL][CPL];
        store_t rsv[UNROLL][3];
        bool cur[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            cur[u] = valid[u];
            const store_t* kp = K + (slot[u] * KVH + g) * HD;
            const store_t* vp = V + (slot[u] * KVH + g) * HD;
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                const int chunk = sub + c * LPT;
                if (cur[u] && chunk < NCHUNK) {
                    kraw[u][c] = *reinterpret_cast<const vec_t*>(kp + chunk * VEC);
                    vraw[u][c] = *reinterpret_cast<const vec_t*>(vp + chunk * VEC);
                }
            }
            if (cur[u]) {
#pragma unroll
                for (int i = 0; i < 3; ++i) rsv[u][i] = vp[HD - 3 + i];
            }
        }
        const unsigned int next = base + NGROUPS * UNROLL;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const unsigned int t = next + u * NGROUPS + my;
            valid[u] = t < t_end;
            slot[u] = valid[u] ? (unsigned long long)pages[t / PAGE_SIZE] * PAGE_SIZE + (t % PAGE_SIZE) : 0ull;
        }
        // 2. Per token: convert its K (scores), then its V (accumulate). Only the raw
        //    vectors of the tokens in flight stay in registers.
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            float kf[CPL][VEC];
            float vf[CPL][VEC];
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                const int chunk = sub + c * LPT;
                if (cur[u] && chunk < NCHUNK) {
                    convert(kraw[u][c], kf[c]);
                } else {
#pragma unroll
                    for (int i = 0; i < VEC; ++i) kf[c][i] = 0.0f;
                }
            }
            float s[G];
#pragma unroll
            for (int j = 0; j < G; ++j) {
                float a = 0.0f;
#pragma unroll
                for (int c = 0; c < CPL; ++c)
#pragma unroll
                    for (int i = 0; i < VEC; ++i) a = fmaf(qr[j][c][i], kf[c][i], a);
                s[j] = a;
            }
            // Every lane of the warp takes part in the shuffles (the loop is warp-uniform).
#pragma unroll
            for (int off = LPT / 2; off > 0; off >>= 1)
#pragma unroll
                for (int j = 0; j < G; ++j) s[j] += __shfl_xor_sync(FULL_MASK, s[j], off);
            if (cur[u]) {
#pragma unroll
                for (int c = 0; c < CPL; ++c) {
                    const int chunk = sub + c * LPT;
                    if (chunk < NCHUNK) {
                        convert(vraw[u][c], vf[c]);
                        if ((chunk + 1) * VEC > HD - 3) provenance(rsv[u], chunk, vf[c], rhi, rlo);
                    } else {
#pragma unroll
                        for (int i = 0; i < VEC; ++i) vf[c][i] = 0.0f;
                    }
                }
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    const float mn = fmaxf(m[j], s[j]);
                    const float corr = __expf(m[j] - mn);  // 0 while m is -inf
                    const float p = __expf(s[j] - mn);
                    l[j] = l[j] * corr + p;
#pragma unroll
                    for (int c = 0; c < CPL; ++c)
#pragma unroll
                        for (int i = 0; i < VEC; ++i)
                            acc[j][c][i] = fmaf(p, vf[c][i], acc[j][c][i] * corr);
                    m[j] = mn;
                }
            }
        }
    }

    // Merge the token groups of the warp (lanes with the same `sub` hold the same dims).
#pragma unroll
    for (int off = LPT; off < 32; off <<= 1) {
#pragma unroll
        for (int j = 0; j < G; ++j) {
            const float om = __shfl_xor_sync(FULL_MASK, m[j], off);
            const float ol = __shfl_xor_sync(FULL_MASK, l[j], off);
            const float mn = fmaxf(m[j], om);
            const float a = m[j] == NEG_INF ? 0.0f : __expf(m[j] - mn);
            const float b = om == NEG_INF ? 0.0f : __expf(om - mn);
            l[j] = l[j] * a + ol * b;
#pragma unroll
            for (int c = 0; c < CPL; ++c)
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float oa = __shfl_xor_sync(FULL_MASK, acc[j][c][i], off);
                    acc[j][c][i] = acc[j][c][i] * a + oa * b;
                }
            m[j] = mn;
        }
    }
    if (tg == 0) {
#pragma unroll
        for (int j = 0; j < G; ++j) {
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                const int chunk = sub + c * LPT;
                if (chunk < NCHUNK) {
#pragma unroll
                    for (int i = 0; i < VEC; ++i) sm_acc[warp][j][chunk * VEC + i] = acc[j][c][i];
                }
            }
            if (sub == 0) {
                sm_m[warp][j] = m[j];
                sm_l[warp][j] = l[j];
            }
        }
    }
    __syncthreads();

    // Merge the warps; each thread finishes some (head, dim) pairs of the partition.
    const unsigned int H = KVH * G;
    for (unsigned int idx = threadIdx.x; idx < G * HD; idx += NW * 32) {
        const unsigned int j = idx / HD;
        const unsigned int d = idx % HD;
        float M = NEG_INF;
#pragma unroll
        for (int w = 0; w < NW; ++w) M = fmaxf(M, sm_m[w][j]);
        float L = 0.0f;
        float A = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float mw = sm_m[w][j];
            const float e = mw == NEG_INF ? 0.0f : __expf(mw - M);
            L += sm_l[w][j] * e;
            A += sm_acc[w][j][d] * e;
        }
        const unsigned long long row = (unsigned long long)part * H + g * G + j;
        part_acc[row * HD + d] = A;
        if (d == 0) {
            part_m[row] = M;
            part_l[row] = L;
        }
    }
}

// Grid (heads); block RED_THREADS. Merges the partitions of one query head into the
// normalised output out[h * HD + d], in parallel over partitions: thread t takes dim
// t % HD of the partitions p = t / HD (mod RED_SLICES), then the slices are summed in shared
// memory. Every partition holds at least one token, so every part_m is finite.
#define RED_SLICES (RED_THREADS / HD)
extern "C" __global__ void __launch_bounds__(RED_THREADS)
attn_reduce(const float* __restrict__ part_m, const float* __restrict__ part_l,
            const float* __restrict__ part_acc, float* __restrict__ out, unsigned int n_parts) {
    __shared__ float red[RED_THREADS];
    const unsigned int h = blockIdx.x;
    const unsigned int H = gridDim.x;
    const unsigned int tid = threadIdx.x;

    float mx = NEG_INF;
    for (unsigned int p = tid; p < n_parts; p += RED_THREADS)
        mx = fmaxf(mx, part_m[(unsigned long long)p * H + h]);
    red[tid] = mx;
    __syncthreads();
    for (unsigned int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    const float M = red[0];
    __syncthreads();

    float ls = 0.0f;
    for (unsigned int p = tid; p < n_parts; p += RED_THREADS) {
        const unsigned long long row = (unsigned long long)p * H + h;
        ls += part_l[row] * expf(part_m[row] - M);
    }
    red[tid] = ls;
    __syncthreads();
    for (unsigned int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float L = red[0];
    __syncthreads();

    const unsigned int d = tid % HD;
    const unsigned int slice = tid / HD;
    float a = 0.0f;
    if (slice < RED_SLICES) {
        for (unsigned int p = slice; p < n_parts; p += RED_SLICES) {
            const unsigned long long row = (unsigned long long)p * H + h;
            a += part_acc[row * HD + d] * expf(part_m[row] - M);
        }
    }
    red[tid] = a;
    __syncthreads();
    if (tid < HD) {
        float sum = 0.0f;
        for (unsigned int k = 0; k < RED_SLICES; ++k) sum += red[k * HD + tid];
        out[h * HD + tid] = sum / L;
    }
}
