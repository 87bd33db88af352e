// _pararnn: the nanobind extension behind the `pararnn_judge` Python package (python/pararnn_judge/__init__.py
// is the public API; docs/python.md). It binds the library's own entry points: newton_apply,
// newton_forward / newton_backward (training), sequential_apply, verify_agreement,
// compare_trajectory, the oracle, Cell::from_case and checked_case, and renders reports with
// AgreementReport::to_json (the CLI's report).
//
// Guarantees: every array argument (numpy, torch, CuPy, JAX: anything speaking DLPack) is
// viewed, never copied, at this boundary: `view_of` hands the ndarray's data pointer, shape,
// strides and device to TensorView::from_dlpack, the library's one DLPack reading, and records
// what it saw for `_last_views()` (the tests' pointer-identity proof). Results are host Tensors
// returned without a copy (the ndarray owns a share of the Tensor's storage). Library errors
// arrive as the Python classes of the same names (ContractViolation is a ValueError).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/contracts/diagnose.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace pararnn::python {
namespace {

using AnyArray = nb::ndarray<nb::ro>;

// A Cell with the metadata of the case it was read from (cell_version and the constructor
// arguments), so that reports record what the CLI's would.
struct PyCell {
  Cell cell;
  std::map<std::string, std::string> metadata;
};

// What the C++ side saw of the arrays of the last call, by argument name.
std::mutex last_views_mutex;
std::map<std::string, std::tuple<std::uintptr_t, Shape, Shape, std::string, std::string>> last_views;

// A caller's array the solver writes into (newton_apply_into's out).
using OutArray = nb::ndarray<>;

template <class Array>
TensorView view_of(const Array& array, const std::string& argument) {
  DLTensor t{};
  t.data = const_cast<void*>(static_cast<const void*>(array.data()));  // byte offset folded in
  t.device = DLDevice{static_cast<DLDeviceType>(array.device_type()), static_cast<std::int32_t>(array.device_id())};
  t.ndim = static_cast<std::int32_t>(array.ndim());
  t.dtype = DLDataType{array.dtype().code, array.dtype().bits, array.dtype().lanes};
  t.shape = const_cast<std::int64_t*>(array.shape_ptr());
  t.strides = const_cast<std::int64_t*>(array.stride_ptr());
  t.byte_offset = 0;
  TensorView view = TensorView::from_dlpack(t, argument);
  {
    std::lock_guard lock(last_views_mutex);
    last_views[argument] = {reinterpret_cast<std::uintptr_t>(view.data()), view.shape(), view.strides(),
                            std::string(dtype_name(view.dtype())), view.device() == Device::cuda ? "cuda" : "cpu"};
  }
  return view;
}

std::optional<TensorView> optional_view(const std::optional<AnyArray>& array, const std::string& argument) {
  if (!array) return std::nullopt;
  return view_of(*array, argument);
}

// A DeviceAllocator whose memory comes from two Python callables: `allocate(bytes, device,
// stream) -> int` (the address) and `free(address)`, e.g. torch's caching allocator
// (pararnn_judge.torch passes torch.cuda.caching_allocator_alloc / _delete). They are called with
// the GIL held (the solve releases it while it runs); a Python exception in `allocate` (torch's
// OutOfMemoryError) becomes the backend's Error naming the allocator and the bytes; one in `free`
// is reported as unraisable. After the interpreter has finalised, memory is left to the process.
struct PyAllocator {
  std::shared_ptr<const DeviceAllocator> allocator;
};

PyAllocator python_allocator(const std::string& name, nb::callable allocate, nb::callable free) {
  // The callables are released with the GIL held, whichever thread drops the last share.
  struct Callables {
    nb::object allocate, free;
    ~Callables() {
      if (!Py_IsInitialized()) {
        (void)allocate.release();
        (void)free.release();
        return;
      }
      nb::gil_scoped_acquire gil;
      allocate.reset();
      free.reset();
    }
  };
  auto callables = std::make_shared<Callables>(Callables{std::move(allocate), std::move(free)});
  auto a = std::make_shared<DeviceAllocator>();
  a->name = name;
  a->allocate = [callables](std::size_t bytes, int device, void* stream) -> void* {
    nb::gil_scoped_acquire gil;
    try {
      const nb::object address = callables->allocate(bytes, device, reinterpret_cast<std::uintptr_t>(stream));
      return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(address));
    } catch (const nb::python_error& e) {
      throw std::runtime_error(e.what());
    } catch (const nb::cast_error&) {
      throw std::runtime_error("its allocate function did not return an integer address");
    }
  };
  a->deallocate = [callables](void* data, std::size_t, int, void*) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    try {
      callables->free(reinterpret_cast<std::uintptr_t>(data));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("pararnn_judge: freeing device memory through the Python allocator");
    }
  };
  return PyAllocator{std::move(a)};
}

// A solve's options from the binding's arguments: `stream` is the integer handle of the CUDA
// stream to run on (torch.cuda.current_stream().cuda_stream; 0 the legacy default stream),
// None for the backend's default (ApplyOptions::cuda_stream); `allocator` the device memory's
// (ApplyOptions::cuda_allocator), None for the backend's pool.
// `parameters` (ApplyOptions::parameters): state_dict name -> an array of the parameter's current
// value where it lives (a live module's CUDA tensor), viewed in place.
using ParameterArrays = std::optional<std::map<std::string, AnyArray>>;
ApplyOptions apply_options(const std::optional<AnyArray>& h0, const std::optional<AnyArray>& cu_seqlens,
                           std::optional<std::uintptr_t> stream, const PyAllocator* allocator = nullptr,
                           const ParameterArrays& parameters = std::nullopt) {
  ApplyOptions apply{.h0 = optional_view(h0, "h0"), .cu_seqlens = optional_view(cu_seqlens, "cu_seqlens")};
  if (stream) apply.cuda_stream = reinterpret_cast<void*>(*stream);
  if (allocator) apply.cuda_allocator = allocator->allocator;
  if (parameters)
    for (const auto& [name, array] : *parameters)
      apply.parameters.emplace(name, view_of(array, fmt::format("parameters['{}']", name)));
  return apply;
}

nb::dlpack::dtype nb_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64: return nb::dtype<double>();
    case DType::f32: return nb::dtype<float>();
    case DType::f16: return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::bf16: return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
    case DType::i32: return nb::dtype<std::int32_t>();
    case DType::i64: return nb::dtype<std::int64_t>();
  }
  return nb::dtype<float>();
}

// A host Tensor as an ndarray (DLPack-capable; the Python layer turns it into numpy or torch)
// that keeps a share of the Tensor's storage alive: no copy.
nb::ndarray<> array_of(const Tensor& tensor) {
  auto* owner = new Tensor(tensor);
  nb::capsule capsule(owner, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
  return nb::ndarray<>(owner->data(), shape.size(), shape.data(), capsule, nullptr, nb_dtype(tensor.dtype()),
                       nb::device::cpu::value);
}

NewtonConfig config_of(const std::string& backend, std::optional<std::int64_t> max_iters,
                       const std::string& coords) {
  NewtonConfig config;
  config.scan_backend = parse_scan_backend(backend);
  config.coords = parse_coords(coords);
  if (max_iters) {
    if (*max_iters < 0)
      throw ContractViolation("max_iters", "must be a non-negative integer or None", std::to_string(*max_iters));
    config.max_iters = *max_iters;
  }
  return config;
}

// The case the oracle and compare read: the cell, its metadata, a host copy of the input
// (the oracle lifts it exactly into its own precision, as verify_agreement does).
Case case_of(const PyCell& py, const TensorView& x, const std::optional<TensorView>& h0,
             const std::optional<TensorView>& cu_seqlens) {
  std::optional<Tensor> h0_copy;
  if (h0) h0_copy = Tensor::copy_of(*h0);
  Case problem = py.cell.make_case(Tensor::copy_of(x), std::move(h0_copy));
  for (const auto& [key, value] : py.metadata)
    if (!problem.metadata.contains(key)) problem.metadata[key] = value;
  if (cu_seqlens) problem.cu_seqlens = Tensor::copy_of(*cu_seqlens);
  return problem;
}

PyCell cell_from_case(const Case& problem) {
  return PyCell{checked_case(problem), problem.metadata};
}

// The constructor arguments and state_dict of a live cell, read as a case file is read
// (case_from_file completes 0.17.4 ParaCfC and M2RNN's k_dim/v_dim) with a one-step zero
// input standing in for x (its d_in from W_x.weight), then both readings (checked_case).
PyCell cell_from_state_dict(const std::string& name, const std::map<std::string, AnyArray>& state_dict,
                            const std::map<std::string, std::string>& arguments) {
  SafetensorsFile file;
  file.metadata = arguments;
  file.metadata["cell"] = name;
  for (const auto& [key, array] : state_dict) file.tensors.emplace(key, Tensor::copy_of(view_of(array, key)));
  const auto mix = arguments.contains("mix") ? arguments.at("mix") : std::string("diag");
  const auto gate_mix = arguments.contains("gate_mix") ? arguments.at("gate_mix") : std::string("input");
  const CellSpec& spec = cell_spec(name, mix == "None" ? "diag" : mix, "name",
                                   gate_mix == "None" ? "input" : gate_mix);
  const AffineBlock& first = spec.affine.front();
  auto w = file.tensors.find(std::string(first.weight));
  if (w == file.tensors.end())
    throw ContractViolation("state_dict", fmt::format("must hold '{}' for {}", first.weight, spec.python_class),
                            "<absent>");
  if (w->second.dim() != 2)
    throw ContractViolation(first.weight, "must be 2-D (out, in)", shape_string(w->second.shape()));
  const std::int64_t d_in = w->second.size(1) + (first.features_only ? 1 : 0);
  file.tensors.emplace("x", Tensor(w->second.dtype(), {1, 1, d_in}));
  return cell_from_case(case_from_file(file, "<state_dict>"));
}

nb::dict stats_dict(const NewtonStats& s) {
  nb::dict d;
  d["max_residual"] = s.max_residual;
  d["iters"] = s.iters;
  d["updates"] = s.updates;
  d["scan_backend"] = std::string(solve_backend_name(s.scan_backend));
  d["strategy"] = std::string(solve_strategy_name(s.strategy));
  d["picard_iters"] = s.picard_iters;
  d["residual_history"] = s.residual_history;
  d["k"] = s.k.k;
  d["k_adaptive"] = s.k.adaptive;
  d["k_source"] = std::string(k_source_name(s.k.source));
  d["converged"] = s.converged;
  d["fallback_tiles"] = s.fallback_tiles;
  // Captured into a CUDA graph: the outcome stayed on the device (max_residual NaN, the rest unknown).
  d["outcome_on_device"] = s.outcome_on_device;
  return d;
}

// A training forward as Python holds it: what the backward reads (H* on the host or on the
// solve's device, and on CUDA W_x x), its stats and the configuration the backward re-solves
// with under recompute.
struct PyForward {
  NewtonForward forward;
  NewtonConfig config;
  bool sync_free = false;  // ApplyOptions::sync_free of the forward, which its backward takes too
};

// The Python exception classes, created at import: name -> class.
std::map<std::string, nb::object> exception_classes;

nb::object new_exception(nb::module_& m, const char* name, nb::handle bases, const char* doc) {
  const std::string qualified = std::string("pararnn_judge.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!cls) throw nb::python_error();
  nb::object object = nb::steal(cls);
  m.attr(name) = object;
  exception_classes[name] = object;
  return object;
}

void raise(const char* name, const std::string& message) {
  PyErr_SetString(exception_classes.at(name).ptr(), message.c_str());
}

}  // namespace
}  // namespace pararnn::python

NB_MODULE(_pararnn, m) {
  using namespace pararnn;
  using namespace pararnn::python;
  m.doc() = "pararnn: parallel Newton solving of nonlinear RNNs, judged by an independent oracle";

  nb::object base = new_exception(m, "Error", nb::make_tuple(nb::handle(PyExc_RuntimeError)),
                                  "Base of every pararnn error.");
  new_exception(m, "ContractViolation", nb::make_tuple(base, nb::handle(PyExc_ValueError)),
                "Bad input: the message is '<argument>: <rule> (got <value>)'.");
  new_exception(m, "CaseFileError", nb::make_tuple(base, nb::handle(PyExc_ValueError)),
                "A case or trajectory file that cannot be read or written.");
  new_exception(m, "NewtonDivergenceError", nb::make_tuple(base),
                "The residual gate fired: the final max|F(H)| is non-finite or above residual_fail.");
  new_exception(m, "AgreementError", nb::make_tuple(base),
                "verify_agreement(..., raise_on_fail=True) found the solver outside the agreement band.");
  new_exception(m, "UnsupportedPath", nb::make_tuple(base, nb::handle(PyExc_NotImplementedError)),
                "An explicitly requested backend or path that cannot run this input.");
  new_exception(m, "CertificationError", nb::make_tuple(base),
                "The oracle's answer is not certified (non-finite, or its self-check is not far below tau).");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ContractViolation& e) {
      raise("ContractViolation", e.what());
    } catch (const CaseFileError& e) {
      raise("CaseFileError", e.what());
    } catch (const NewtonDivergenceError& e) {
      raise("NewtonDivergenceError", e.what());
    } catch (const AgreementError& e) {
      raise("AgreementError", e.what());
    } catch (const UnsupportedPath& e) {
      raise("UnsupportedPath", e.what());
    } catch (const Error& e) {
      raise("Error", e.what());
    }
  });

  nb::class_<PyCell>(m, "Cell")
      .def_prop_ro("name", [](const PyCell& c) { return std::string(c.cell.name()); })
      .def_prop_ro("python_class", [](const PyCell& c) { return std::string(c.cell.spec().python_class); })
      .def_prop_ro("d_in", [](const PyCell& c) { return c.cell.d_in(); })
      .def_prop_ro("d_h", [](const PyCell& c) { return c.cell.d_h(); })
      .def_prop_ro("slots", [](const PyCell& c) { return c.cell.slots(); })
      .def_prop_ro("dtype", [](const PyCell& c) { return std::string(dtype_name(c.cell.dtype())); })
      .def_prop_ro("state_shape", [](const PyCell& c) { return c.cell.state_shape(); })
      .def("_trajectory_shape", [](const PyCell& c, std::int64_t batch, std::int64_t time) {
        return c.cell.trajectory_shape(batch, time);
      }, "batch"_a, "time"_a)
      .def_prop_ro("metadata", [](const PyCell& c) {
        std::map<std::string, std::string> m = c.cell.metadata();
        for (const auto& [key, value] : c.metadata) m.try_emplace(key, value);
        return m;
      })
      .def("_parameter_names", [](const PyCell& c) {
        std::vector<std::string> names;
        for (const auto& [name, tensor] : c.cell.parameters()) names.push_back(name);
        return names;
      })
      .def("_state_dict", [](const PyCell& c) {
        nb::dict d;
        for (const auto& [name, tensor] : c.cell.parameters()) d[name.c_str()] = array_of(tensor);
        return d;
      })
      .def("__repr__", [](const PyCell& c) {
        return fmt::format("pararnn_judge.Cell({} '{}', d_in={}, d_h={}, dtype={})", c.cell.spec().python_class,
                           c.cell.name(), c.cell.d_in(), c.cell.d_h(), dtype_name(c.cell.dtype()));
      });

  m.def("_cell_initialise",
        [](const std::string& name, std::int64_t d_in, std::int64_t d_h, const std::string& dtype, std::uint64_t seed,
           const std::string& mix, std::optional<std::int64_t> n_heads, std::optional<std::int64_t> k_dim,
           std::optional<std::int64_t> v_dim, std::optional<double> weight_std) {
          CellOptions options{.cell = name, .mix = mix, .d_in = d_in, .d_h = d_h, .n_heads = n_heads,
                              .weight_std = weight_std, .k_dim = k_dim, .v_dim = v_dim};
          const CellSpec& spec = cell_spec(name, mix, "name");
          options.max_recurrent_norm = spec.default_cap;
          return PyCell{Cell::initialise(options, parse_dtype(dtype, "dtype"), seed), {}};
        },
        "name"_a, "d_in"_a, "d_h"_a, "dtype"_a, "seed"_a, "mix"_a, "n_heads"_a.none(), "k_dim"_a.none(),
        "v_dim"_a.none(), "weight_std"_a.none());
  m.def("_cell_from_case", [](const std::string& path) { return cell_from_case(read_case(path)); }, "path"_a);
  m.def("_cell_from_state_dict", &cell_from_state_dict, "name"_a, "state_dict"_a, "arguments"_a);
  m.def("_cell_with_parameters",
        [](const PyCell& c, const std::map<std::string, AnyArray>& values) {
          // The same cell with new parameter values (a live module after an optimizer step): each
          // named parameter replaced by a host copy of its array, which must keep its shape and
          // dtype (Cell::set_parameter); the structure and the metadata are the cell's.
          PyCell out = c;
          for (const auto& [name, array] : values) out.cell.set_parameter(name, Tensor::copy_of(view_of(array, name)));
          return out;
        },
        "cell"_a, "values"_a);
  m.def("_read_case", [](const std::string& path) {
    const Case problem = read_case(path);
    nb::dict d;
    d["cell"] = nb::cast(cell_from_case(problem));
    d["x"] = array_of(problem.x);
    if (problem.h0) d["h0"] = array_of(*problem.h0);
    if (problem.cu_seqlens) d["cu_seqlens"] = array_of(*problem.cu_seqlens);
    if (problem.grad_H) d["grad_H"] = array_of(*problem.grad_H);
    d["metadata"] = problem.metadata;
    return d;
  }, "path"_a);
  m.def("_write_case",
        [](const std::string& path, const std::map<std::string, AnyArray>& tensors,
           const std::map<std::string, std::string>& metadata) {
          std::map<std::string, Tensor> owned;
          for (const auto& [name, array] : tensors) owned.emplace(name, Tensor::copy_of(view_of(array, name)));
          SafetensorsFile file{owned, metadata};
          (void)checked_case(case_from_file(file, path));  // never write a case the judge refuses
          write_safetensors(path, owned, metadata);
        },
        "path"_a, "tensors"_a, "metadata"_a);

  nb::class_<AgreementReport>(m, "AgreementReport")
      .def_prop_ro("ok", [](const AgreementReport& r) { return r.ok && r.verdict == Verdict::agree; })
      .def_prop_ro("verdict", [](const AgreementReport& r) { return std::string(verdict_name(r.verdict)); })
      .def_ro("max_abs", &AgreementReport::max_abs)
      .def_ro("max_rel", &AgreementReport::max_rel)
      .def_ro("mean_abs", &AgreementReport::mean_abs)
      .def_ro("atol", &AgreementReport::atol)
      .def_ro("rtol", &AgreementReport::rtol)
      .def_ro("inconclusive_reason", &AgreementReport::inconclusive_reason)
      .def_ro("gradients_missing", &AgreementReport::gradients_missing)
      .def_ro("ill_conditioned", &AgreementReport::ill_conditioned)
      .def_ro("mismatches", &AgreementReport::mismatches)
      .def_ro("backend", &AgreementReport::backend)
      .def("to_json", [](const AgreementReport& r) { return r.to_json().dump(); })
      .def("summary", &AgreementReport::summary)
      .def("failure_message", &AgreementReport::failure_message)
      .def("__repr__", [](const AgreementReport& r) {
        return fmt::format("pararnn_judge.AgreementReport(verdict={}, max_abs={:.3e}, atol={:g})", verdict_name(r.verdict),
                           r.max_abs, r.atol);
      });

  m.def("_newton_apply",
        [](const PyCell& c, const AnyArray& x, std::optional<AnyArray> h0, std::optional<AnyArray> cu_seqlens,
           const std::string& backend, std::optional<std::int64_t> max_iters, const std::string& coords,
           std::optional<std::uintptr_t> stream, const PyAllocator* allocator, const ParameterArrays& parameters) {
          const TensorView xv = view_of(x, "x");
          const ApplyOptions apply = apply_options(h0, cu_seqlens, stream, allocator, parameters);
          NewtonStats stats;
          Tensor H;
          {
            nb::gil_scoped_release release;
            H = newton_apply(c.cell, xv, config_of(backend, max_iters, coords), apply, &stats);
          }
          return nb::make_tuple(array_of(H), stats_dict(stats));
        },
        "cell"_a, "x"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "backend"_a, "max_iters"_a.none(), "coords"_a,
        "stream"_a.none() = nb::none(), "allocator"_a.none() = nb::none(), "parameters"_a.none() = nb::none());
  m.def("_newton_apply_into",
        [](const PyCell& c, const AnyArray& x, const OutArray& out, std::optional<AnyArray> h0,
           std::optional<AnyArray> cu_seqlens, const std::string& backend, std::optional<std::int64_t> max_iters,
           const std::string& coords, std::optional<std::uintptr_t> stream, const PyAllocator* allocator,
           const ParameterArrays& parameters) {
          const TensorView xv = view_of(x, "x");
          const TensorView ov = view_of(out, "out");
          const ApplyOptions apply = apply_options(h0, cu_seqlens, stream, allocator, parameters);
          NewtonStats stats;
          {
            nb::gil_scoped_release release;
            newton_apply_into(c.cell, xv, ov, config_of(backend, max_iters, coords), apply, &stats);
          }
          return stats_dict(stats);
        },
        "cell"_a, "x"_a, "out"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "backend"_a, "max_iters"_a.none(),
        "coords"_a, "stream"_a.none() = nb::none(), "allocator"_a.none() = nb::none(),
        "parameters"_a.none() = nb::none());
  nb::class_<PyForward>(m, "_Forward")
      .def_prop_ro("saved_bytes", [](const PyForward& f) { return f.forward.saved_bytes(); })
      .def_prop_ro("stats", [](const PyForward& f) { return stats_dict(f.forward.stats); });
  m.def("_newton_forward",
        [](const PyCell& c, const AnyArray& x, std::optional<OutArray> H_out, std::optional<AnyArray> h0,
           std::optional<AnyArray> cu_seqlens, const std::string& backend, std::optional<std::int64_t> max_iters,
           bool recompute, std::optional<std::uintptr_t> stream, const PyAllocator* allocator,
           const ParameterArrays& parameters, bool sync_free) {
          const TensorView xv = view_of(x, "x");
          const std::optional<TensorView> ov = H_out ? std::optional(view_of(*H_out, "H_out")) : std::nullopt;
          ApplyOptions apply = apply_options(h0, cu_seqlens, stream, allocator, parameters);
          apply.sync_free = sync_free;
          PyForward f{.config = config_of(backend, max_iters, "native"), .sync_free = sync_free};
          f.config.recompute = recompute;
          {
            nb::gil_scoped_release release;
            f.forward = ov ? newton_forward_into(c.cell, xv, *ov, f.config, apply)
                           : newton_forward(c.cell, xv, f.config, apply);
          }
          // H is in `H_out` when one was given (forward.H then holds nothing the caller reads).
          nb::object H = ov ? nb::none() : nb::cast(array_of(f.forward.H));
          return nb::make_tuple(H, std::move(f));
        },
        "cell"_a, "x"_a, "H_out"_a.none(), "h0"_a.none(), "cu_seqlens"_a.none(), "backend"_a, "max_iters"_a.none(),
        "recompute"_a, "stream"_a.none() = nb::none(), "allocator"_a.none() = nb::none(),
        "parameters"_a.none() = nb::none(), "sync_free"_a = false);
  m.def("_newton_backward",
        [](const PyCell& c, const AnyArray& x, const PyForward& f, const AnyArray& grad_H,
           std::optional<OutArray> grad_x, std::optional<AnyArray> h0, std::optional<AnyArray> cu_seqlens,
           std::optional<std::uintptr_t> stream, const PyAllocator* allocator, const ParameterArrays& parameters,
           const std::optional<std::map<std::string, OutArray>>& parameter_grads_out) {
          const TensorView xv = view_of(x, "x");
          const TensorView gv = view_of(grad_H, "grad_H");
          const std::optional<TensorView> dxv = grad_x ? std::optional(view_of(*grad_x, "grad_x")) : std::nullopt;
          ApplyOptions apply = apply_options(h0, cu_seqlens, stream, allocator, parameters);
          apply.sync_free = f.sync_free;
          if (parameter_grads_out)
            for (const auto& [name, array] : *parameter_grads_out)
              apply.parameter_gradients.emplace(name, view_of(array, fmt::format("parameter_gradients['{}']", name)));
          NewtonGradients grads;
          {
            nb::gil_scoped_release release;
            grads = dxv ? newton_backward_into(c.cell, xv, f.forward, gv, *dxv, f.config, apply)
                        : newton_backward(c.cell, xv, f.forward, gv, f.config, apply);
          }
          nb::dict parameter_grads;
          for (const auto& [name, tensor] : grads.parameters) parameter_grads[name.c_str()] = array_of(tensor);
          nb::dict d;
          d["x"] = dxv ? nb::none() : nb::cast(array_of(grads.x));
          d["h0"] = grads.h0 ? nb::cast(array_of(*grads.h0)) : nb::none();
          d["parameters"] = parameter_grads;
          return d;
        },
        "cell"_a, "x"_a, "forward"_a, "grad_H"_a, "grad_x"_a.none(), "h0"_a.none(), "cu_seqlens"_a.none(),
        "stream"_a.none() = nb::none(), "allocator"_a.none() = nb::none(), "parameters"_a.none() = nb::none(),
        "parameter_gradients"_a.none() = nb::none());
  m.def("_cuda_reads_parameter_views", [](const PyCell& c) { return cuda_reads_parameter_views(c.cell); }, "cell"_a,
        "Whether a CUDA solve of this cell reads parameters=... views (ApplyOptions::parameters).");
  nb::class_<PyAllocator>(m, "_Allocator")
      .def_prop_ro("name", [](const PyAllocator& a) { return a.allocator->name; });
  m.def("_python_allocator", &python_allocator, "name"_a, "allocate"_a, "free"_a,
        "A device allocator for the CUDA backend from two Python callables: allocate(bytes, device, stream) "
        "-> address and free(address).");
  m.def("_cuda_transfers", []() {
    const CudaTransferBytes t = cuda_transfer_bytes();
    nb::dict d;
    d["to_device"] = t.to_device;
    d["to_host"] = t.to_host;
    d["host_reads"] = t.host_reads;
    d["stream_syncs"] = t.stream_syncs;
    return d;
  }, "The CUDA backend's transfer and synchronisation counters since the process started (cuda_transfer_bytes).");
  m.def("_cuda_release_cached_memory", [](int device) {
    nb::gil_scoped_release release;
    cuda_release_cached_memory(device);
  }, "device"_a);
  m.def("_cuda_cached_memory", [](int device) { return cuda_cached_memory(device); }, "device"_a);
  m.def("_sequential_apply",
        [](const PyCell& c, const AnyArray& x, std::optional<AnyArray> h0, std::optional<AnyArray> cu_seqlens,
           const std::string& backend) {
          const TensorView xv = view_of(x, "x");
          const ApplyOptions apply{.h0 = optional_view(h0, "h0"), .cu_seqlens = optional_view(cu_seqlens, "cu_seqlens")};
          const ScanBackend b = parse_scan_backend(backend);
          Tensor H;
          {
            nb::gil_scoped_release release;
            H = b == ScanBackend::auto_select ? sequential_apply(c.cell, xv, apply) : sequential_apply(c.cell, xv, b, apply);
          }
          return array_of(H);
        },
        "cell"_a, "x"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "backend"_a);
  m.def("_verify_agreement",
        [](const PyCell& c, const AnyArray& x, std::optional<AnyArray> h0, std::optional<AnyArray> cu_seqlens,
           const std::string& backend, std::optional<std::int64_t> max_iters, std::optional<double> atol,
           std::uint64_t seed, std::optional<std::int64_t> certify_budget, bool gradients,
           std::optional<AnyArray> grad_H, bool raise_on_fail, std::optional<AnyArray> host_x,
           std::optional<AnyArray> host_h0, const std::string& coords) {
          VerifyOptions options;
          options.host_x = optional_view(host_x, "host_x");
          options.host_h0 = optional_view(host_h0, "host_h0");
          const TensorView xv = view_of(x, "x");
          options.config = config_of(backend, max_iters, coords);
          options.h0 = optional_view(h0, "h0");
          options.cu_seqlens = optional_view(cu_seqlens, "cu_seqlens");
          options.atol = atol;
          options.seed = seed;
          options.certify_budget = certify_budget;
          options.gradients = gradients;
          options.grad_H = optional_view(grad_H, "grad_H");
          options.raise_on_fail = raise_on_fail;
          options.repro_command = fmt::format("pararnn_judge.verify_agreement(cell, x, backend='{}', max_iters={}, seed={}{})",
                                              backend, max_iters ? std::to_string(*max_iters) : "None", seed,
                                              coords == "native" ? "" : ", coords='" + coords + "'");
          if (auto it = c.metadata.find("cell_version"); it != c.metadata.end()) options.cell_version = it->second;
          nb::gil_scoped_release release;
          return verify_agreement(c.cell, xv, options);
        },
        "cell"_a, "x"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "backend"_a, "max_iters"_a.none(), "atol"_a.none(),
        "seed"_a, "certify_budget"_a.none(), "gradients"_a, "grad_H"_a.none(), "raise_on_fail"_a, "host_x"_a.none(),
        "host_h0"_a.none(), "coords"_a);
  m.def("_compare",
        [](const PyCell& c, const AnyArray& x, const AnyArray& H, std::optional<AnyArray> h0,
           std::optional<AnyArray> cu_seqlens, std::optional<double> atol, std::uint64_t seed,
           std::optional<std::int64_t> certify_budget, bool raise_on_fail,
           std::optional<std::map<std::string, AnyArray>> gradients, std::optional<AnyArray> grad_H) {
          const TensorView xv = view_of(x, "x");
          const TensorView Hv = view_of(H, "H");
          Case problem = case_of(c, xv, optional_view(h0, "h0"), optional_view(cu_seqlens, "cu_seqlens"));
          if (grad_H) problem.grad_H = Tensor::copy_of(view_of(*grad_H, "grad_H"));
          std::optional<ExternalGradients> external;
          if (gradients) {
            external = ExternalGradients{.source = "gradients"};
            for (const auto& [name, array] : *gradients) external->tensors.emplace(name, view_of(array, name));
          }
          VerifyOptions options;
          options.atol = atol;
          options.seed = seed;
          options.certify_budget = certify_budget;
          options.raise_on_fail = raise_on_fail;
          options.repro_command = fmt::format("pararnn_judge.compare(cell, x, H, seed={}{})", seed,
                                              gradients ? ", gradients=..." : "");
          nb::gil_scoped_release release;
          return compare_trajectory(problem, Hv, options, external);
        },
        "cell"_a, "x"_a, "H"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "atol"_a.none(), "seed"_a,
        "certify_budget"_a.none(), "raise_on_fail"_a, "gradients"_a.none(), "grad_H"_a.none());
  m.def("_oracle",
        [](const PyCell& c, const AnyArray& x, std::optional<AnyArray> h0, std::optional<AnyArray> cu_seqlens,
           std::uint64_t seed, std::optional<std::int64_t> certify_budget) {
          const TensorView xv = view_of(x, "x");
          const Case problem = case_of(c, xv, optional_view(h0, "h0"), optional_view(cu_seqlens, "cu_seqlens"));
          (void)checked_case(problem);
          reference::OracleResult result;
          {
            nb::gil_scoped_release release;
            result = reference::oracle_sequential(
                problem, {.certify = true,
                          .certify_budget = certify_budget.value_or(default_certify_budget(problem.dtype())),
                          .seed = seed});
          }
          // The CLI's rule: an uncertified oracle is no answer.
          if (const auto why = certification_failure(result.finite, result.self_check_delta,
                                                     result.certified_chain_steps, problem, "trajectory")) {
            raise("CertificationError", *why);
            throw nb::python_error();
          }
          nb::dict info;
          info["type"] = result.type;
          info["digits"] = result.digits;
          info["certifier_type"] = result.certifier_type;
          info["certifier_digits"] = result.certifier_digits;
          info["self_check_delta"] = result.self_check_delta;
          info["certified_all_chains"] = result.certified_all_chains;
          info["certified_chain_steps"] = result.certified_chain_steps;
          return nb::make_tuple(array_of(result.H), info);
        },
        "cell"_a, "x"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "seed"_a, "certify_budget"_a.none());
  m.def("_diagnose",
        [](const PyCell& c, const AnyArray& x, std::optional<AnyArray> h0, std::optional<AnyArray> cu_seqlens,
           std::int64_t window, std::int64_t chains, std::uint64_t seed, std::optional<std::int64_t> certify_budget) {
          const TensorView xv = view_of(x, "x");
          const Case problem = case_of(c, xv, optional_view(h0, "h0"), optional_view(cu_seqlens, "cu_seqlens"));
          Diagnosis d;
          {
            nb::gil_scoped_release release;
            d = diagnose_case(problem, {.window = window, .chains = chains, .seed = seed,
                                        .certify_budget = certify_budget});
          }
          // The CLI's rule (exit 2): an uncertified trajectory or a non-finite estimate is no number.
          if (!d.estimate) {
            raise("CertificationError", "diagnose: inconclusive: " + d.inconclusive_reason);
            throw nb::python_error();
          }
          return d.to_json().dump();
        },
        "cell"_a, "x"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "window"_a, "chains"_a, "seed"_a,
        "certify_budget"_a.none());
  m.def("_predict_k_from_trajectory",
        [](const PyCell& c, const AnyArray& x, const AnyArray& H, std::optional<AnyArray> h0,
           std::optional<AnyArray> cu_seqlens, std::optional<double> tau, std::int64_t window) {
          const TensorView xv = view_of(x, "x");
          const TensorView Hv = view_of(H, "H");
          const ApplyOptions apply{.h0 = optional_view(h0, "h0"), .cu_seqlens = optional_view(cu_seqlens, "cu_seqlens")};
          const double t = tau ? *tau : tolerance_for({.dtype = c.cell.dtype(), .cell = std::string(c.cell.name())}).atol;
          if (!(t > 0.0) || !std::isfinite(t))
            throw ContractViolation("tau", "must be finite and > 0", fmt::format("{}", t));
          IteratePrediction p;
          {
            nb::gil_scoped_release release;
            p = predict_from_iterate(c.cell, xv, Hv, apply, t, window);
          }
          return p.to_json().dump();
        },
        "cell"_a, "x"_a, "H"_a, "h0"_a.none(), "cu_seqlens"_a.none(), "tau"_a.none(), "window"_a);
  m.def("_last_views", []() {
    std::lock_guard lock(last_views_mutex);
    nb::dict d;
    for (const auto& [argument, seen] : last_views) {
      const auto& [data, shape, strides, dtype, device] = seen;
      nb::dict v;
      v["data"] = data;
      v["shape"] = shape;
      v["strides"] = strides;
      v["dtype"] = dtype;
      v["device"] = device;
      d[argument.c_str()] = v;
    }
    return d;
  }, "What the C++ side saw of each array argument of the calls so far: data pointer, shape, "
     "strides (elements), dtype, device (the tests' proof that arrays are viewed, not copied).");
  m.def("_clear_last_views", []() {
    std::lock_guard lock(last_views_mutex);
    last_views.clear();
  });
  m.attr("cuda_backend_built") =
#ifdef PARARNN_WITH_CUDA
      true;
#else
      false;
#endif
}
