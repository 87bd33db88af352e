// A forward-mode dual number (value, one tangent) for the backward of the dense-chain cells on
// both backends: their step templates (cells/hopfield.hpp, gru_head.hpp, slstm_head.hpp)
// instantiated with Dual<double> give one column of ∂h'/∂(gate inputs, parameters, h_prev) per
// evaluation, from which the backward forms μᵀ ∂h'/∂θ (solver/src/cpu/dense.cpp on the host,
// kernels/src/dense_vjp.cu on the device). The derivative is the step's own arithmetic
// differentiated, so it can never disagree with the step's definition; the hand-derived
// Jacobian in the step (J = ∂h'/∂h) is used for the adjoint recurrence itself.
//
// Guarantees: + − × ÷, unary −, comparisons (on the value: a plain branch picks the branch's
// derivative), and the cells' exp_of / tanh_of / tie_max (found by argument-dependent lookup)
// carry exact first derivatives; tie_max (sLSTM's stabiliser) gives 1/2 to each side at an exact
// tie, the convention of the hand Jacobian and of the oracle. Every member is PARARNN_HD (host
// and device under nvcc); the values are those of cell_math.hpp's exp_of / tanh_of, so a
// Dual's value is bit for bit the plain step's. Example:
//   Dual<double> x{2.0, 1.0};
//   Dual<double> y = x * x + exp_of(x);   // y.d == 2·2 + e²
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

template <class T>
struct Dual {
  T v = T(0);  // value
  T d = T(0);  // tangent
  Dual() = default;
  PARARNN_HD Dual(T value) : v(value) {}  // NOLINT: constants such as ComputeT(1) in the step templates
  PARARNN_HD Dual(T value, T tangent) : v(value), d(tangent) {}

  PARARNN_HD friend Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
  PARARNN_HD friend Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
  PARARNN_HD friend Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
  PARARNN_HD friend Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
  PARARNN_HD friend Dual operator-(Dual a) { return {-a.v, -a.d}; }
  PARARNN_HD Dual& operator+=(Dual b) { return *this = *this + b; }
  PARARNN_HD Dual& operator-=(Dual b) { return *this = *this - b; }
  PARARNN_HD Dual& operator*=(Dual b) { return *this = *this * b; }
  PARARNN_HD Dual& operator/=(Dual b) { return *this = *this / b; }
  PARARNN_HD friend bool operator>(Dual a, Dual b) { return a.v > b.v; }
  PARARNN_HD friend bool operator<(Dual a, Dual b) { return a.v < b.v; }
  PARARNN_HD friend bool operator>=(Dual a, Dual b) { return a.v >= b.v; }
  PARARNN_HD friend bool operator<=(Dual a, Dual b) { return a.v <= b.v; }
  PARARNN_HD friend bool operator==(Dual a, Dual b) { return a.v == b.v; }

  // The cells' scalar functions (cells/cell_math.hpp), overloaded for duals.
  PARARNN_HD friend Dual exp_of(Dual a) {
    const T e = exp_of(a.v);
    return {e, e * a.d};
  }
  PARARNN_HD friend Dual tie_max(Dual left, Dual right) {
    if (left.v > right.v) return left;
    if (left.v == right.v) return {left.v, (left.d + right.d) / T(2)};
    return right;
  }
  PARARNN_HD friend Dual tanh_of(Dual a) {
    const T t = tanh_of(a.v);
    return {t, (T(1) - t * t) * a.d};
  }
};

}  // namespace pararnn::cells
