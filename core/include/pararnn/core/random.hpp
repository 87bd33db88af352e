// The project's one random stream: SplitMix64 and the draws made from it. Every generated value
// of the library and its tests (Cell::initialise, generated case inputs, make-case's h0, the
// campaign's h0, the property generators, the benchmarks' inputs, the kernel tests) comes from
// here, so a seed replays the same case with every compiler and standard library (the <random>
// distributions are implementation-defined: libstdc++ and libc++ draw different normals from the
// same engine). The oracle keeps its own generators, independent of production code by design:
// its certification sample and its tests draw from std::mt19937_64's engine output (specified
// by the standard) through their own transforms, never through a <random> distribution.
//
// Guarantees: `next()` is SplitMix64 (Steele, Lea, Flood 2014), the same 64 bits everywhere;
// `uniform()` is the top 53 bits of one `next()` scaled to [0, 1); `below(n)` is `next() % n`
// (bias at most n / 2⁶⁴, immaterial for test draws); `normal()` is the Marsaglia polar method on
// two uniforms in (−1, 1), the second value of a pair discarded so that every draw depends only on
// the stream position. It calls std::log and std::sqrt: sqrt is correctly rounded (IEEE 754), and
// the normals are bit-identical wherever std::log is (glibc's is correctly rounded in practice)
// and the compiler does not contract u·u + v·v into an FMA (GCC under -std=c++20, the project's
// build, does not; clang's default -ffp-contract=on may on FMA targets).
// Not for cryptography. Example:
//   SplitMix64 rng(seed);
//   double w = rng.normal(0.0, 0.5), u = rng.uniform(-1.0, 1.0);
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>

namespace pararnn {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1), and in [lo, hi).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), n >= 1, in n's type.
  template <std::integral I>
  I below(I n) {
    return static_cast<I>(next() % static_cast<std::uint64_t>(n));
  }

  // A standard normal draw, and N(mean, std²).
  double normal() {
    for (;;) {
      const double u = 2.0 * uniform() - 1.0;
      const double v = 2.0 * uniform() - 1.0;
      const double s = u * u + v * v;
      if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * std::log(s) / s);
    }
  }
  double normal(double mean, double std) { return mean + std * normal(); }

 private:
  std::uint64_t state_;
};

}  // namespace pararnn
