// harness.cpp — drives the emulated kernels (see emu.h). Compiled by tests/it/emu.rs with
// -DKVSIM_EMU and an include path holding the generated kernel.cu.
//
// stdin (whitespace separated):
//   pool_slots
//   n_writes, then per write: tenant request n_tok, then n_tok pairs "slot pos"
//   n_reads,  then per read:  reader_tenant seq_len part_tokens n_pages pages... heads q[heads*HD]
// stdout: per read, heads*HD output floats, then the partials (n_parts*heads max, n_parts*heads
// sums, n_parts*heads*HD accumulators, attn_partial's layout), one per line (%.9g).
#include "emu.h"
#include "kernel.cu"

#include <cstdio>

int main() {
    unsigned long long pool_slots = 0;
    if (scanf("%llu", &pool_slots) != 1) return 2;
    const unsigned long long per_slot = (unsigned long long)KVH * HD;
    std::vector<store_t> K(pool_slots * per_slot), V(pool_slots * per_slot);  // zeroed once
    unsigned int n_writes = 0;
    if (scanf("%u", &n_writes) != 1) return 2;
    for (unsigned int w = 0; w < n_writes; ++w) {
        unsigned int tenant, request;
        unsigned long long n_tok;
        if (scanf("%u %u %llu", &tenant, &request, &n_tok) != 3) return 2;
        std::vector<unsigned long long> slots(n_tok), pos(n_tok);
        for (unsigned long long i = 0; i < n_tok; ++i)
            if (scanf("%llu %llu", &slots[i], &pos[i]) != 2) return 2;
        // Any grid works: kv_write is a grid-stride loop. One small block keeps threads few.
        emu::launch(dim3{2, 1, 1}, dim3{32, 1, 1}, [&] {
            kv_write(K.data(), V.data(), slots.data(), pos.data(), n_tok, tenant, request);
        });
    }
    unsigned int n_reads = 0;
    if (scanf("%u", &n_reads) != 1) return 2;
    for (unsigned int r = 0; r < n_reads; ++r) {
        unsigned int reader, seq_len, part_tokens, n_pages, heads;
        if (scanf("%u %u %u %u", &reader, &seq_len, &part_tokens, &n_pages) != 4) return 2;
        std::vector<unsigned int> pages(n_pages);
        for (auto& p : pages)
            if (scanf("%u", &p) != 1) return 2;
        if (scanf("%u", &heads) != 1) return 2;
        std::vector<float> q((size_t)heads * HD);
        for (auto& x : q)
            if (scanf("%f", &x) != 1) return 2;
        const unsigned int n_parts = (seq_len + part_tokens - 1) / part_tokens;
        std::vector<float> pm((size_t)n_parts * heads), pl(pm.size()), pa(pm.size() * HD), out(q.size());
        const float scale = 1.0f / std::sqrt((float)HD);
        emu::launch(dim3{n_parts, KVH, 1}, dim3{NW * 32, 1, 1}, [&] {
            attn_partial(K.data(), V.data(), pages.data(), q.data(), pm.data(), pl.data(), pa.data(),
                         seq_len, part_tokens, reader, scale);
        });
        emu::launch(dim3{heads, 1, 1}, dim3{RED_THREADS, 1, 1}, [&] {
            attn_reduce(pm.data(), pl.data(), pa.data(), out.data(), n_parts);
        });
        for (float x : out) printf("%.9g\n", x);
        for (const auto* v : {&pm, &pl, &pa})
            for (float x : *v) printf("%.9g\n", x);
    }
    return 0;
}
