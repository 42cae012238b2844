#include "case_io.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>

std::string rank_dir(const HostArgs& a) {
    return a.case_root + "/golden/" + a.case_id + "/rank_" + std::to_string(a.pe_id);
}

// Reads the first `read_bytes` of a file that must hold exactly `expect_bytes`.
template <typename V>
static bool read_prefix(const std::string& path, uint64_t expect_bytes, uint64_t read_bytes, V* out,
                        std::string* error) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        *error = path + ": cannot open (" + strerror(errno) + ")";
        return false;
    }
    if (uint64_t(st.st_size) != expect_bytes) {
        *error = path + ": " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(expect_bytes) +
                 " for this shape";
        return false;
    }
    out->resize(read_bytes / sizeof(typename V::value_type));
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        *error = path + ": cannot open (" + strerror(errno) + ")";
        return false;
    }
    const size_t got = read_bytes ? fread(out->data(), 1, read_bytes, f) : 0;
    fclose(f);
    if (got != read_bytes) {
        *error = path + ": short read (" + std::to_string(got) + " of " + std::to_string(read_bytes) + " bytes)";
        return false;
    }
    return true;
}

template <typename V>
static bool read_exact(const std::string& path, uint64_t expect_bytes, V* out, std::string* error) {
    return read_prefix(path, expect_bytes, expect_bytes, out, error);
}

bool read_rank_case(const HostArgs& a, RankCase* rc, std::string* error) {
    const std::string d = rank_dir(a);
    const uint64_t rows = a.capacity_rows(), e = a.elem_bytes();
    const uint64_t slots = uint64_t(a.bs) * a.topk, segs = uint64_t(a.expert_per_pe) * a.pe_size;
    if (!read_exact(d + "/assist_info.bin", rows * 3 * 4, &rc->assist_info, error) ||
        !read_exact(d + "/ep_recv_count.bin", segs * 4, &rc->ep_recv_count, error) ||
        !read_exact(d + "/expert_ids.bin", slots * 4, &rc->expert_ids, error) ||
        !read_exact(d + "/expert_scales.bin", slots * 4, &rc->expert_scales, error) ||
        !read_exact(d + "/golden_x_out.bin", uint64_t(a.bs) * a.h * e, &rc->golden_x_out, error))
        return false;
    char buf[512];
    int32_t prev = 0;
    for (uint64_t s = 0; s < segs; ++s) {
        const int32_t c = rc->ep_recv_count[s];
        if (c < prev || uint64_t(c) > rows) {
            snprintf(buf, sizeof buf, "%s/ep_recv_count.bin: index %llu is %d after %d: counts must be cumulative "
                     "(non-decreasing) and at most %llu rows", d.c_str(), (unsigned long long)s, c, prev,
                     (unsigned long long)rows);
            *error = buf;
            return false;
        }
        for (int32_t r = prev; r < c; ++r) {
            const int32_t* row = &rc->assist_info[uint64_t(r) * 3];
            const bool ok = row[0] == int32_t(s % a.pe_size) && row[1] >= 0 && uint32_t(row[1]) < a.bs &&
                            row[2] >= 0 && uint32_t(row[2]) < a.topk;
            if (!ok) {
                snprintf(buf, sizeof buf, "%s/assist_info.bin: row %d is (src_rank %d, token %d, topk %d): segment %llu "
                         "needs src_rank %llu, token in [0, %u), topk in [0, %u)", d.c_str(), r, row[0], row[1],
                         row[2], (unsigned long long)s, (unsigned long long)(s % a.pe_size), a.bs, a.topk);
                *error = buf;
                return false;
            }
        }
        prev = c;
    }
    // Rows past the last count are padding: checked for size, never read.
    rc->used_rows = uint64_t(prev);
    if (!read_prefix(d + "/expand_x.bin", rows * a.h * e, rc->used_rows * a.h * e, &rc->expand_x, error)) return false;
    // expert_ids: any value is valid; an id outside [0, experts) (-1, or E as padding) is a
    // masked slot (docs/protocol.md#1-the-combine-problem), which the kernel neither waits for nor sums.
    return true;
}

bool write_file(const std::string& path, const void* data, size_t bytes, std::string* error) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
        *error = path + ": cannot write (" + strerror(errno) + ")";
        return false;
    }
    return true;
}

static uint16_t float_to_half(float f) {
    // Round to nearest even, as numpy's astype(float16) does.
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffffu;
    if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00u | (man ? 0x200u : 0u));
    if (exp >= 31) return uint16_t(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return uint16_t(sign);
        man |= 0x800000u;
        const uint32_t shift = uint32_t(14 - exp);
        uint32_t h = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) ++h;
        return uint16_t(sign | h);
    }
    uint32_t h = uint32_t(exp) << 10 | (man >> 13);
    const uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: still right
    return uint16_t(sign | h);
}

// float -> bfloat16 (its top 16 bits), half to even, as the kernel's CAST_RINT and ml_dtypes do.
static uint16_t float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN stays NaN
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_float(uint16_t b) {
    const uint32_t x = uint32_t(b) << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

// A 2-byte T's bits for f (T = float16_t or bfloat16_t).
static uint16_t to_bits16(const HostArgs& a, float f) {
    return a.dtype == combine::Dtype::BFloat16 ? float_to_bf16(f) : float_to_half(f);
}

void fill_rows(const HostArgs& a, double value, uint8_t* out, size_t bytes) {
    if (a.dtype == combine::Dtype::Int32) {
        const int32_t v = int32_t(value);
        for (size_t i = 0; i + 4 <= bytes; i += 4) memcpy(out + i, &v, 4);
    } else {
        const uint16_t v = to_bits16(a, float(value));
        for (size_t i = 0; i + 2 <= bytes; i += 2) memcpy(out + i, &v, 2);
    }
}

void expected_constant_x_out(const HostArgs& a, const RankCase& rc, double value, uint8_t* out) {
    const float v = float(value);
    for (uint32_t t = 0; t < a.bs; ++t) {
        float acc = 0.0f;
        for (uint32_t k = 0; k < a.topk; ++k) {
            const int32_t e = rc.expert_ids[t * a.topk + k];
            if (e < 0 || uint32_t(e) >= a.experts()) continue;
            const float prod = v * rc.expert_scales[t * a.topk + k];
            acc = acc + prod;
        }
        for (uint32_t c = 0; c < a.h; ++c) {
            if (a.dtype == combine::Dtype::Int32) {
                const int32_t x = int32_t(acc);
                memcpy(out + (uint64_t(t) * a.h + c) * 4, &x, 4);
            } else {
                const uint16_t x = to_bits16(a, acc);
                memcpy(out + (uint64_t(t) * a.h + c) * 2, &x, 2);
            }
        }
    }
}

static float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            uint32_t m = man;
            do { m <<= 1; ++e; } while ((m & 0x400) == 0);
            bits = sign | uint32_t(127 - 15 - e) << 23 | (m & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint64_t count_mismatches(const HostArgs& a, const uint8_t* x_out, const uint8_t* golden, std::string* detail) {
    const uint64_t n = uint64_t(a.bs) * a.h;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; ++i) {
        double x, g;
        bool ok;
        if (a.dtype == combine::Dtype::Int32) {
            int32_t xi, gi;
            memcpy(&xi, x_out + i * 4, 4);
            memcpy(&gi, golden + i * 4, 4);
            x = xi; g = gi;
            ok = xi == gi;
        } else {
            uint16_t xh, gh;
            memcpy(&xh, x_out + i * 2, 2);
            memcpy(&gh, golden + i * 2, 2);
            const bool bf16 = a.dtype == combine::Dtype::BFloat16;
            x = bf16 ? bf16_to_float(xh) : half_to_float(xh);
            g = bf16 ? bf16_to_float(gh) : half_to_float(gh);
            ok = xh == gh && !std::isnan(x);  // the same bits: both reduce in float32 in topk order
        }
        if (!ok && bad++ == 0) {
            char buf[160];
            snprintf(buf, sizeof buf, "x_out[token %llu, col %llu] = %.6g, golden %.6g", (unsigned long long)(i / a.h),
                     (unsigned long long)(i % a.h), x, g);
            *detail = buf;
        }
    }
    return bad;
}
