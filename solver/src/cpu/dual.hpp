// A forward-mode dual number (value, one tangent) for the CPU backward of the dense-chain cells:
// their step templates (cells/hopfield.hpp, gru_head.hpp, slstm_head.hpp) instantiated with
// Dual<double> give one column of ∂h'/∂(gate inputs, parameters) per evaluation, from which the
// backward forms μᵀ ∂h'/∂θ (cpu/dense.cpp). The derivative is the step's own arithmetic
// differentiated, so it can never disagree with the step's definition; the hand-derived
// Jacobian in the step (J = ∂h'/∂h) is used for the adjoint recurrence itself.
//
// Guarantees: + − × ÷, unary −, comparisons (on the value: a plain branch picks the branch's
// derivative), and the cells' exp_of / tanh_of / tie_max (found by argument-dependent lookup)
// carry exact first derivatives; tie_max (sLSTM's stabiliser) gives 1/2 to each side at an exact
// tie, the convention of the hand Jacobian and of the oracle. Example:
//   Dual<double> x{2.0, 1.0};
//   Dual<double> y = x * x + exp_of(x);   // y.d == 2·2 + e²
#pragma once

#include <cmath>

namespace pararnn::detail {

template <class T>
struct Dual {
  T v = T(0);  // value
  T d = T(0);  // tangent
  Dual() = default;
  Dual(T value) : v(value) {}  // NOLINT: constants such as ComputeT(1) in the step templates
  Dual(T value, T tangent) : v(value), d(tangent) {}

  friend Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
  friend Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
  friend Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
  friend Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
  friend Dual operator-(Dual a) { return {-a.v, -a.d}; }
  Dual& operator+=(Dual b) { return *this = *this + b; }
  Dual& operator-=(Dual b) { return *this = *this - b; }
  Dual& operator*=(Dual b) { return *this = *this * b; }
  Dual& operator/=(Dual b) { return *this = *this / b; }
  friend bool operator>(Dual a, Dual b) { return a.v > b.v; }
  friend bool operator<(Dual a, Dual b) { return a.v < b.v; }
  friend bool operator>=(Dual a, Dual b) { return a.v >= b.v; }
  friend bool operator<=(Dual a, Dual b) { return a.v <= b.v; }
  friend bool operator==(Dual a, Dual b) { return a.v == b.v; }

  // The cells' scalar functions (cells/cell_math.hpp), overloaded for duals.
  friend Dual exp_of(Dual a) {
    const T e = std::exp(a.v);
    return {e, e * a.d};
  }
  friend Dual tie_max(Dual left, Dual right) {
    if (left.v > right.v) return left;
    if (left.v == right.v) return {left.v, (left.d + right.d) / T(2)};
    return right;
  }
  friend Dual tanh_of(Dual a) {
    const T t = std::tanh(a.v);
    return {t, (T(1) - t * t) * a.d};
  }
};

}  // namespace pararnn::detail
