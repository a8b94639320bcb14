// native.cpp — running an op on the device. PyTorch's Meta kernel computes
// the outputs' metadata (raising PyTorch's own errors for bad arguments before
// anything runs); functional results are allocated, in-place and out=
// arguments are resized as the Meta kernel resized them; the stack becomes
// tpuc_args in schema order and tpuc_op_run launches the op. Anything the
// core cannot take sends the call back to the CPU path, saying why.
#include "ops.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>

namespace tpuc_torch {

Kind kind_of(const c10::TypePtr& declared) {
  c10::TypePtr t = declared;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return Kind::Tensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
    case c10::TypeKind::ScalarTypeType:
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType: return Kind::Int;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType: return Kind::Float;
    case c10::TypeKind::NumberType: return Kind::Scalar;
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType: return Kind::Bool;
    case c10::TypeKind::StringType: return Kind::String;
    case c10::TypeKind::GeneratorType: return Kind::Generator;
    case c10::TypeKind::DeviceObjType: return Kind::Device;
    case c10::TypeKind::ListType: {
      c10::TypePtr e = t->castRaw<c10::ListType>()->getElementType();
      if (auto opt = e->cast<c10::OptionalType>()) {
        return opt->getElementType()->kind() == c10::TypeKind::TensorType ? Kind::OptTensorList
                                                                           : Kind::Unsupported;
      }
      switch (e->kind()) {
        case c10::TypeKind::TensorType: return Kind::TensorList;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: return Kind::IntList;
        case c10::TypeKind::BoolType: return Kind::BoolList;
        default: return Kind::Unsupported;
      }
    }
    default: return Kind::Unsupported;
  }
}

bool describe(const at::Tensor& t, tpuc_tensor* out) {
  // through the TensorImpl's size and stride arrays: size(d)/stride(d) wrap
  // and check each index (about 0.1k instructions per tensor, three per op)
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!t.is_privateuseone() || t.is_conj() || t.is_neg()) return false;
  const c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  const size_t ndim = sizes.size();
  if (ndim > TPUC_MAX_DIMS || strides.size() != ndim) return false;
  if (!to_tpuc_dtype(t.scalar_type(), &out->dtype)) return false;
  out->storage = storage_of(impl->storage());
  out->ndim = static_cast<int>(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    out->sizes[d] = sizes[d];
    out->strides[d] = strides[d];
  }
  out->offset = impl->storage_offset();
  return true;
}

namespace {

// Everything one native call needs to stay alive until tpuc_op_run returns.
// Small calls (nearly all) live on the stack: no allocation here on a hit.
struct NativeCall {
  c10::SmallVector<tpuc_arg, 12> args;
  c10::SmallVector<tpuc_tensor, 6> tensors;
  c10::SmallVector<tpuc_tensor, 4> outputs;
  // made on first use (a std::deque allocates when constructed)
  std::unique_ptr<std::deque<std::vector<int64_t>>> int_lists;
  std::unique_ptr<std::deque<std::string>> strings;
  std::vector<at::Tensor> keep;  // uploaded CPU tensors
  // the promoted dtype of the tpu tensor arguments (upload_host_operand)
  c10::ScalarType common = c10::ScalarType::Undefined;
  int device = -1;
};

// Thrown (internally) when the native path cannot take the call; says why.
struct NotNative {
  std::string why;
};

// The Meta computation of one call.
struct MetaState {
  torch::jit::Stack stack;   // the arguments' stand-ins, then the results
  int device = -1;           // the tpu device of the call
  // a cache hit: the cached results (then `stack` is unused)
  std::shared_ptr<const OpInfo::MetaResult> hit;
  const torch::jit::Stack& results() const { return hit ? hit->results : stack; }
};

// A tpu tensor's stand-in on the Meta device; CPU tensors stay (the Meta
// kernel then checks devices as PyTorch does: CPU scalars and index tensors
// pass, other mixes raise "Expected all tensors to be on the same device").
at::Tensor to_meta(const at::Tensor& t, MetaState& ms) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  int d = t.device().index();
  if (ms.device < 0) ms.device = d;
  TORCH_CHECK(ms.device == d, "Expected all tensors to be on the same device, but found at "
              "least two devices, tpu:", ms.device, " and tpu:", d, "!");
  return at::Tensor(at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type()));
}

c10::IValue meta_ivalue(const c10::IValue& v, MetaState& ms) {
  if (v.isTensor()) return to_meta(v.toTensor(), ms);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(to_meta(t, ms));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& t : v.toOptionalTensorVector())
      out.push_back(t.has_value() ? std::optional<at::Tensor>(to_meta(*t, ms)) : std::nullopt);
    return out;
  }
  if (v.isDevice() && v.toDevice().is_privateuseone()) {  // a factory's (_efficientzerotensor)
    if (ms.device < 0) ms.device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
    return c10::Device(c10::kMeta);
  }
  // A generator never changes an output's metadata, and PyTorch's Python meta kernels of
  // the random ops refuse one (torch._refs.exponential: "generator is not supported in
  // refs"), so x.exponential_(generator=g) failed before running: the Meta kernel gets None.
  if (v.isGenerator()) return c10::IValue();
  return v;
}

// Runs the op's Meta kernel on stand-ins of the stack's arguments: the
// outputs' metadata, and PyTorch's own errors for bad arguments (raised here,
// before anything runs). False when there is no Meta kernel for the call.
// OpInfo::own_grouped_mm_meta: _grouped_mm(self, mat2, offs, bias, out_dtype)'s
// output as PyTorch's Meta kernel computes it (the same size rules and
// checks), without CUDA's dtype and alignment rules. The stack holds the
// stand-ins; it is left holding the result.
void grouped_mm_meta(MetaState& ms) {
  const at::Tensor a = ms.stack[0].toTensor(), b = ms.stack[1].toTensor();
  const c10::IValue offs_v = ms.stack[2];
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  TORCH_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3),
              "Multiplicands must be 2D or 3D but got mat_a.dim()=", a.dim(),
              " and mat_b.dim()=", b.dim());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "Expected mat_a and mat_b of one dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  if (!a2 || !b2)
    TORCH_CHECK(a.size(-1) == b.size(-2), "contraction dimension of mat_a and mat_b must match");
  int64_t groups = 0;
  if (a2 || b2) {
    TORCH_CHECK(offs_v.isTensor(), "Offsets tensor is required when mat_a or mat_b is 2D");
    const at::Tensor& offs = offs_v.toTensor();
    TORCH_CHECK(offs.dim() == 1, "Offsets tensor must be 1D, but got offs.dim()=", offs.dim(), ".");
    TORCH_CHECK(offs.scalar_type() == at::kInt,
                "Offsets tensor must be integer (int32) tensor, but got ", offs.scalar_type(), ".");
    groups = offs.size(0);
  } else {
    TORCH_CHECK(!offs_v.isTensor(), "Offsets tensor must not be provided for 3D x 3D");
  }
  std::vector<int64_t> size;
  if (a2 && b2) {
    size = {groups, a.size(0), b.size(1)};
  } else if (a2) {
    TORCH_CHECK(groups == b.size(0), "matrix batch sizes have to match");
    size = {a.size(0), b.size(-1)};
  } else if (b2) {
    TORCH_CHECK(groups == a.size(0), "matrix batch sizes have to match");
    size = {a.size(1), b.size(1)};
  } else {
    TORCH_CHECK(a.size(0) == b.size(0), "batched dimension has to match");
    size = {a.size(0), a.size(1), b.size(-1)};
  }
  const c10::IValue& dt = ms.stack[4];
  const c10::ScalarType out = dt.isNone() ? a.scalar_type() : dt.toScalarType();
  std::vector<int64_t> stride(size.size(), 1);
  for (int64_t i = static_cast<int64_t>(size.size()) - 2; i >= 0; --i)
    stride[i] = stride[i + 1] * std::max<int64_t>(size[i + 1], 1);
  ms.stack.clear();
  ms.stack.push_back(at::Tensor(at::detail::empty_strided_meta(size, stride, out)));
}

}  // namespace

namespace {

bool run_meta(const c10::OperatorHandle& op, const torch::jit::Stack& stack, MetaState& ms,
              const OpInfo& info) {
  const size_t nargs = op.schema().arguments().size();
  const size_t begin = stack.size() - nargs;
  ms.stack.clear();
  ms.stack.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) ms.stack.push_back(meta_ivalue(stack[begin + i], ms));
  if (info.own_grouped_mm_meta) {
    grouped_mm_meta(ms);
    return true;
  }
  if (info.like_arg_meta >= 0) {  // OpInfo::like_arg_meta: one output like that input
    const at::Tensor like = ms.stack[info.like_arg_meta].toTensor();
    const std::vector<int64_t> size = like.sizes().vec();
    std::vector<int64_t> stride(size.size(), 1);
    for (int64_t i = static_cast<int64_t>(size.size()) - 2; i >= 0; --i)
      stride[i] = stride[i + 1] * std::max<int64_t>(size[i + 1], 1);
    const c10::ScalarType dt = like.scalar_type();
    ms.stack.clear();
    ms.stack.push_back(at::Tensor(at::detail::empty_strided_meta(size, stride, dt)));
    return true;
  }
  if (info.cpp_meta) {
    info.cpp_meta(ms.stack);  // a c10::Error: PyTorch's own, as on the CPU
    return true;
  }
  try {
    // The dispatch table's Meta entry: a Meta kernel, or a composite kernel
    // that computes on Meta tensors (convolution); "no kernel" raises
    // NotImplementedError.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &ms.stack);
  } catch (const c10::NotImplementedError&) {
    return false;
  } catch (const c10::Error&) {
    throw;  // shapes, dtypes, devices, ...: PyTorch's own exception
  } catch (pybind11::error_already_set& e) {
    // A Python meta kernel's exception. NotImplementedError (e.g. a
    // data-dependent output shape: index with a boolean mask) means "no
    // Meta kernel for this call"; anything else is the user's error, raised
    // with its Python type.
    pybind11::gil_scoped_acquire gil;
    if (e.matches(PyExc_NotImplementedError)) return false;
    throw;
  }
  return true;
}

// ---- the Meta-result cache ----
// The signature of a call as far as its Meta kernel can see it: each
// tensor's device, dtype, sizes and strides; the values of ints, bools,
// floats, strings and of integer and boolean Scalars; only the kind of a
// floating-point Scalar (a learning rate, an alpha: changing it must stay
// cheap), except for factories whose Scalars give the output's shape.
// Not keyed (the Meta kernel runs every time): host tensors of several
// elements, whose values may shape the result.
//
// The key is written into a thread's reused string through KeyWriter: about
// 30 small appends per call, each std::string::append an out-of-line call
// with its own checks (600 instructions per tensor in callgrind); here each
// is a compare and a memcpy, and the string only grows.
struct KeyWriter {
  std::string& s;
  size_t n = 0;
  explicit KeyWriter(std::string& str) : s(str) { s.resize(std::max<size_t>(s.capacity(), 256)); }
  // inlined (a fixed-size memcpy at each of ~30 call sites); growing is the
  // rare out-of-line path (an out-of-line put was ~540 instructions per op)
  [[gnu::always_inline]] void put(const void* p, size_t len) {
    if (__builtin_expect(n + len > s.size(), 0)) grow(n + len);
    std::memcpy(s.data() + n, p, len);
    n += len;
  }
  [[gnu::noinline]] void grow(size_t need) { s.resize(std::max(2 * s.size(), need)); }
  void finish() { s.resize(n); }  // keeps the capacity
};

[[gnu::always_inline]] inline void key_bytes(KeyWriter& k, const void* p, size_t n) { k.put(p, n); }
template <typename T>
[[gnu::always_inline]] inline void key_val(KeyWriter& k, T v) {
  key_bytes(k, &v, sizeof v);
}

bool key_tensor(KeyWriter& k, const at::Tensor& t, int& device) {
  key_val<int8_t>(k, t.defined());
  if (!t.defined()) return true;
  // A host tensor of several elements (indices, repeats) may shape the
  // result by its values: such calls are not cached.
  if (!t.is_privateuseone() && t.numel() > 1) return false;
  if (t.is_privateuseone()) {
    int d = t.device().index();
    if (device >= 0 && device != d) return false;  // the Meta path raises PyTorch's error
    device = d;
  }
  key_val<int16_t>(k, static_cast<int16_t>(t.device().type()));
  key_val<int8_t>(k, static_cast<int8_t>(t.scalar_type()));
  // a wrapped number (the 2 of x + 2) promotes differently from a 0-dim tensor
  key_val<int8_t>(k, static_cast<int8_t>(t.is_conj() | t.is_neg() << 1 |
                                         t.unsafeGetTensorImpl()->is_wrapped_number() << 2));
  key_val<int32_t>(k, static_cast<int32_t>(t.dim()));
  key_bytes(k, t.sizes().data(), t.dim() * sizeof(int64_t));
  key_bytes(k, t.strides().data(), t.dim() * sizeof(int64_t));
  return true;
}

// key_ivalue's bytes for c10::IValue(s) of a Scalar argument, without
// making the IValue; false for a symbolic one.
bool key_scalar(KeyWriter& k, const at::Scalar& s, const OpInfo& info) {
  if (s.isSymbolic()) return false;
  if (s.isFloatingPoint()) {  // IValue(Scalar)'s order: double, complex, bool, int
    key_val<int8_t>(k, 7);
    if (info.meta_uses_scalar_values) key_val<double>(k, s.toDouble());
  } else if (s.isComplex()) {
    key_val<int8_t>(k, 8);
    if (info.meta_uses_scalar_values) {
      auto c = s.toComplexDouble();
      key_val<double>(k, c.real());
      key_val<double>(k, c.imag());
    }
  } else if (s.isBoolean()) {
    key_val<int8_t>(k, 6);
    key_val<int8_t>(k, s.toBool());
  } else if (s.isUnsigned()) {  // an IValue Int when it fits, else UInt (not keyed)
    const uint64_t u = s.toUInt64();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    key_val<int8_t>(k, 5);
    key_val<int64_t>(k, static_cast<int64_t>(u));
  } else if (s.isIntegral(/*includeBool=*/false)) {
    key_val<int8_t>(k, 5);
    key_val<int64_t>(k, s.toLong());
  } else {
    return false;
  }
  return true;
}

// One argument's part of the key; false for a kind the cache does not key.
bool key_ivalue(KeyWriter& k, const c10::IValue& v, Kind kind, const OpInfo& info, int& device) {
  if (v.isTensor()) {
    key_val<int8_t>(k, 1);
    return key_tensor(k, v.toTensor(), device);
  } else if (v.isTensorList()) {
    key_val<int8_t>(k, 2);
    auto ts = v.toListRef();  // references: no copy of the tensors (a copy costs the GIL)
    key_val<int64_t>(k, static_cast<int64_t>(ts.size()));
    for (const c10::IValue& t : ts)
      if (!key_tensor(k, t.toTensor(), device)) return false;
  } else if (v.isOptionalTensorList()) {
    key_val<int8_t>(k, 3);
    auto ts = v.toListRef();
    key_val<int64_t>(k, static_cast<int64_t>(ts.size()));
    static const at::Tensor kNone;
    for (const c10::IValue& t : ts)
      if (!key_tensor(k, t.isTensor() ? t.toTensor() : kNone, device)) return false;
  } else if (v.isNone()) {
    key_val<int8_t>(k, 4);
  } else if (v.isInt()) {  // integer Scalars too: checks may read them (int ** -1)
    key_val<int8_t>(k, 5);
    key_val<int64_t>(k, v.toInt());
  } else if (v.isBool()) {
    key_val<int8_t>(k, 6);
    key_val<int8_t>(k, v.toBool());
  } else if (v.isDouble()) {
    key_val<int8_t>(k, 7);
    if (kind == Kind::Scalar && !info.meta_uses_scalar_values) return true;
    key_val<double>(k, v.toDouble());
  } else if (v.isComplexDouble()) {
    key_val<int8_t>(k, 8);
    if (!info.meta_uses_scalar_values) return true;
    auto c = v.toComplexDouble();
    key_val<double>(k, c.real());
    key_val<double>(k, c.imag());
  } else if (v.isIntList()) {
    key_val<int8_t>(k, 9);
    auto l = v.toIntVector();
    key_val<int64_t>(k, static_cast<int64_t>(l.size()));
    key_bytes(k, l.data(), l.size() * sizeof(int64_t));
  } else if (v.isBoolList()) {
    key_val<int8_t>(k, 10);
    for (bool b : v.toBoolList()) key_val<int8_t>(k, b);
  } else if (v.isString()) {
    key_val<int8_t>(k, 11);
    const std::string& str = v.toStringRef();
    key_bytes(k, str.c_str(), str.size() + 1);  // with its '\0'
  } else if (v.isDevice()) {
    key_val<int8_t>(k, 12);
    key_val<int16_t>(k, static_cast<int16_t>(v.toDevice().type()));
    key_val<int16_t>(k, v.toDevice().has_index() ? v.toDevice().index() : -1);
    if (device < 0 && v.toDevice().is_privateuseone())  // as meta_ivalue
      device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
  } else if (v.isGenerator()) {
    key_val<int8_t>(k, 13);  // which generator does not change shapes
  } else {
    return false;  // a kind the cache does not key: run the Meta kernel
  }
  return true;
}

// torch.set_default_dtype changes Meta results (int tensor * 0.1 is of the
// default dtype): every key starts with it.
[[gnu::always_inline]] inline void key_default_dtype(KeyWriter& k) {
  key_val<int8_t>(k, static_cast<int8_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
}

bool meta_key(const torch::jit::Stack& stack, size_t begin, size_t nargs, const OpInfo& info,
              KeyWriter& k, int& device) {
  device = -1;
  key_default_dtype(k);
  for (size_t i = 0; i < nargs; ++i)
    if (!key_ivalue(k, stack[begin + i], info.kinds[i], info, device)) return false;
  return true;
}

// run_meta with a per-operator cache of its results.
bool run_meta_cached(const c10::OperatorHandle& op, OpInfo& info, const torch::jit::Stack& stack,
                     MetaState& ms) {
  const size_t nargs = op.schema().arguments().size();
  const size_t begin = stack.size() - nargs;
  thread_local std::string key;
  int device = -1;
  KeyWriter w(key);
  if (!meta_key(stack, begin, nargs, info, w, device))
    return run_meta(op, stack, ms, info);
  w.finish();
  {
    std::lock_guard<std::mutex> lock(info.meta_mu);
    auto it = info.meta_cache.find(key);
    if (it != info.meta_cache.end()) {
      ms.device = device;
      ms.hit = it->second;  // a reference: the results are never written
      return ms.hit->ok;
    }
  }
  bool ok = run_meta(op, stack, ms, info);  // raises PyTorch's errors: nothing cached then
  auto r = std::make_shared<OpInfo::MetaResult>();
  r->ok = ok;
  if (ok) r->results = ms.stack;
  std::lock_guard<std::mutex> lock(info.meta_mu);
  if (info.meta_cache.size() >= 512) info.meta_cache.clear();  // bounded
  info.meta_cache.emplace(key, std::move(r));
  return ok;
}

}  // namespace

std::shared_ptr<const OpInfo::MetaResult> cached_binary_meta(OpInfo& info, const at::Tensor& a,
                                                             const at::Tensor& b,
                                                             const at::Scalar* alpha, int& device) {
  // the bytes meta_key writes for the stack (a, b[, alpha]): one cache for both paths
  thread_local std::string key;
  device = -1;
  KeyWriter w(key);
  key_default_dtype(w);
  key_val<int8_t>(w, 1);
  if (!key_tensor(w, a, device)) return nullptr;
  key_val<int8_t>(w, 1);
  if (!key_tensor(w, b, device)) return nullptr;
  if (alpha && !key_scalar(w, *alpha, info)) return nullptr;
  w.finish();
  std::lock_guard<std::mutex> lock(info.meta_mu);
  auto it = info.meta_cache.find(key);
  if (it == info.meta_cache.end() || !it->second->ok) return nullptr;
  return it->second;
}

namespace {

int add_tensor(const at::Tensor& t, NativeCall& call) {
  tpuc_tensor d{};
  // No copy of `t` itself: taking a reference to a tensor Python holds costs
  // the GIL (the TensorImpl's PyObject is kept alive with it).
  const at::Tensor* src = &t;
  if (!t.is_privateuseone()) {  // a CPU scalar, or CPU indices: upload
    at::Tensor dev = upload_host_operand(t, call.common, false, static_cast<c10::DeviceIndex>(call.device));
    call.keep.push_back(std::move(dev));
    src = &call.keep.back();
  } else if (t.is_conj() || t.is_neg()) {  // a lazy conj/neg (mm takes them): materialize
    call.keep.push_back(t.resolve_conj().resolve_neg());
    src = &call.keep.back();
  }
  const at::Tensor& dev = *src;
  if (!describe(dev, &d))
    throw NotNative{std::string("a tensor of dtype ") + c10::toString(t.scalar_type()) +
                    " or rank " + std::to_string(t.dim()) + " the core cannot take"};
  call.tensors.push_back(d);
  return static_cast<int>(call.tensors.size() - 1);
}

tpuc_arg scalar_arg(const c10::IValue& v) {
  tpuc_arg a{};
  a.kind = TPUC_ARG_SCALAR;
  if (v.isBool()) {
    a.scalar.kind = TPUC_SCALAR_BOOL;
    a.scalar.i = v.toBool();
    a.scalar.re = static_cast<double>(a.scalar.i);
  } else if (v.isInt()) {
    a.scalar.kind = TPUC_SCALAR_INT;
    a.scalar.i = v.toInt();
    a.scalar.re = static_cast<double>(a.scalar.i);
  } else if (v.isDouble()) {
    a.scalar.kind = TPUC_SCALAR_FLOAT;
    a.scalar.re = v.toDouble();
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    a.scalar.kind = TPUC_SCALAR_COMPLEX;
    a.scalar.re = c.real();
    a.scalar.im = c.imag();
  } else {
    throw NotNative{"a symbolic scalar"};  // never on a real device
  }
  return a;
}

tpuc_arg translate(const c10::IValue& v, Kind kind, NativeCall& call, int64_t draws) {
  tpuc_arg a{};
  if (v.isNone() && kind != Kind::Generator) {
    a.kind = TPUC_ARG_NONE;
    return a;
  }
  switch (kind) {
    case Kind::Tensor:
      if (!v.toTensor().defined()) {
        a.kind = TPUC_ARG_NONE;
        return a;
      }
      a.kind = TPUC_ARG_TENSOR;
      a.tensors.first = add_tensor(v.toTensor(), call);
      a.tensors.count = 1;
      return a;
    case Kind::TensorList:
    case Kind::OptTensorList: {
      auto ts = v.toListRef();  // references: no copy of the tensors (a copy costs the GIL)
      a.kind = TPUC_ARG_TENSORS;
      a.tensors.first = static_cast<int>(call.tensors.size());
      a.tensors.count = static_cast<int>(ts.size());
      for (const c10::IValue& e : ts) {
        if (e.isTensor() && e.toTensor().defined()) {
          add_tensor(e.toTensor(), call);
        } else {  // None in a Tensor?[] (x[:, idx]): an absent tensor
          call.tensors.push_back(tpuc_tensor{});
        }
      }
      return a;
    }
    case Kind::Int:
      if (!v.isInt()) throw NotNative{"a symbolic int"};
      a.kind = TPUC_ARG_INT;
      a.i = v.toInt();
      return a;
    case Kind::Float:
    case Kind::Scalar:
      return scalar_arg(v);
    case Kind::Bool:
      if (!v.isBool()) throw NotNative{"a symbolic bool"};
      a.kind = TPUC_ARG_BOOL;
      a.i = v.toBool();
      return a;
    case Kind::IntList:
    case Kind::BoolList: {
      std::vector<int64_t> xs;
      if (v.isIntList()) {
        xs = v.toIntVector();
      } else if (v.isBoolList()) {
        for (bool b : v.toBoolList()) xs.push_back(b);
      } else {
        throw NotNative{"a symbolic int list"};
      }
      if (!call.int_lists) call.int_lists = std::make_unique<std::deque<std::vector<int64_t>>>();
      call.int_lists->push_back(std::move(xs));
      a.kind = kind == Kind::IntList ? TPUC_ARG_INTS : TPUC_ARG_BOOLS;
      a.ints.v = call.int_lists->back().data();
      a.ints.n = static_cast<int>(call.int_lists->back().size());
      return a;
    }
    case Kind::String:
      if (!call.strings) call.strings = std::make_unique<std::deque<std::string>>();
      call.strings->push_back(v.toStringRef());
      a.kind = TPUC_ARG_STRING;
      a.s = call.strings->back().c_str();
      return a;
    case Kind::Generator: {
      at::Generator g = tpu_generator(v, static_cast<c10::DeviceIndex>(call.device));
      if (!g.defined()) throw NotNative{"a generator of another device"};
      auto [seed, offset] = reserve_random(g, static_cast<uint64_t>(draws));
      a.kind = TPUC_ARG_RNG;
      a.rng.seed = seed;
      a.rng.offset = offset;
      return a;
    }
    case Kind::Device:
      a.kind = TPUC_ARG_INT;
      a.i = v.toDevice().has_index() ? v.toDevice().index() : call.device;
      return a;
    default:
      throw NotNative{"an argument type the core has no tpuc_arg for (float[], ...)"};
  }
}

}  // namespace

// A fresh tpu tensor for a Meta result: its strides when dense, else contiguous.
at::Tensor allocate_like_meta(const at::Tensor& m, c10::DeviceIndex device) {
  if (m.is_non_overlapping_and_dense()) return empty_tpu(m.sizes(), m.strides(), m.scalar_type(), device);
  return empty_tpu(m.sizes(), {}, m.scalar_type(), device);
}

// Makes a mutated argument's metadata what the Meta kernel made it.
void follow_meta(const at::Tensor& real, const at::Tensor& m) {
  if (!real.defined() || !m.defined()) return;
  if (real.sizes().equals(m.sizes()) && real.strides().equals(m.strides())) return;
  restride_tpu(real, m.sizes(), m.strides());
}

namespace {

// An output of the call. An undefined result (a gradient output_mask did not
// ask for) keeps its position as an absent tensor (NULL storage).
void add_output(const at::Tensor& t, NativeCall& call) {
  tpuc_tensor d{};
  if (t.defined() && !describe(t, &d))
    throw NotNative{std::string("an output of dtype ") + c10::toString(t.scalar_type()) +
                    ", rank " + std::to_string(t.dim()) + " or with a conj/neg bit"};
  call.outputs.push_back(d);
}

}  // namespace

bool run_native(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack,
                std::string& why, bool* compiling) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const auto& rets = schema.returns();
  const size_t nargs = args.size();
  const size_t begin = stack->size() - nargs;
  NativeCall call;
  try {
    // 1. Metadata (and PyTorch's own argument errors) from the Meta kernel.
    MetaState ms;
    if (!run_meta_cached(op, info, *stack, ms)) {
      why = "no Meta kernel for these arguments (e.g. a data-dependent output shape)";
      return false;
    }
    if (ms.device < 0) {
      why = "no tpu tensor among its arguments";
      return false;
    }
    call.device = ms.device;
    if (info.bn_eval != OpInfo::BnEval::None) {  // it edits the results: a copy of a hit's
      if (ms.hit) {
        ms.stack = ms.hit->results;
        ms.hit.reset();
      }
      eval_batch_norm_stats(schema, info, *stack, begin, ms.stack);
    }
    const torch::jit::Stack& meta = ms.results();
    TORCH_INTERNAL_ASSERT(meta.size() == rets.size());
    const auto device = static_cast<c10::DeviceIndex>(call.device);

    // 2. Outputs: mutated arguments follow the Meta kernel; others are fresh.
    c10::SmallVector<c10::IValue, 4> results;
    int64_t draws = 0;
    for (size_t i = 0; i < rets.size(); ++i) {
      const c10::IValue& m = meta[i];
      const c10::AliasInfo* alias = rets[i].alias_info();
      if (alias && alias->isWrite()) {
        int j = info.ret_alias_arg[i];
        TORCH_INTERNAL_ASSERT(j >= 0, info.name, ": a mutable return without its argument");
        const c10::IValue& real = (*stack)[begin + j];
        if (m.isTensor()) {
          follow_meta(real.toTensor(), m.toTensor());
        } else if (m.isTensorList()) {
          auto rs = real.toTensorVector();
          auto ms = m.toTensorVector();
          for (size_t k = 0; k < rs.size() && k < ms.size(); ++k) follow_meta(rs[k], ms[k]);
        }
        results.push_back(real);
      } else if (m.isTensor()) {
        const at::Tensor& mt = m.toTensor();
        results.push_back(mt.defined() ? allocate_like_meta(mt, device) : at::Tensor());
      } else if (m.isTensorList()) {
        std::vector<at::Tensor> ts;
        for (const at::Tensor& mt : m.toTensorVector())
          ts.push_back(mt.defined() ? allocate_like_meta(mt, device) : at::Tensor());
        results.push_back(c10::IValue(c10::List<at::Tensor>(ts)));
      } else if (m.isNone()) {
        results.push_back(m);
      } else {
        why = "a non-tensor result";
        return false;
      }
    }
    for (const auto& r : results) {
      if (r.isTensor()) {
        add_output(r.toTensor(), call);
        if (r.toTensor().defined()) draws = std::max(draws, r.toTensor().numel());
      } else if (r.isTensorList()) {
        for (const at::Tensor& t : r.toTensorVector()) {
          add_output(t, call);
          if (t.defined()) draws = std::max(draws, t.numel());
        }
      }
    }
    if (info.pointwise) check_pointwise_writes(info, *stack, begin, nargs);  // operands.cpp
    // Then the arguments the op writes without returning them (_foreach_*_,
    // _fused_adamw_, native_batch_norm's running stats), in argument order.
    for (int j : info.unreturned_writes) {
      const c10::IValue& v = (*stack)[begin + j];  // None: nothing to write
      if (v.isTensor() && v.toTensor().defined()) add_output(v.toTensor(), call);
      if (v.isTensorList())
        for (const c10::IValue& t : v.toListRef()) add_output(t.toTensor(), call);
    }

    // 3. The arguments, in schema order (+ the default generator for random
    //    ops without a Generator argument, like native_dropout). A random op
    //    draws for its largest output or tensor argument before the generator
    //    (multinomial: a key per category, more than the samples it returns).
    call.common = tpu_tensors_dtype(info, *stack, begin, nargs);  // operands.cpp
    for (size_t i = 0; i < nargs; ++i) {
      const c10::IValue& v = (*stack)[begin + i];
      if (v.isTensor() && v.toTensor().defined()) draws = std::max(draws, v.toTensor().numel());
      call.args.push_back(translate(v, info.kinds[i], call, draws));
    }
    if (info.appends_rng) call.args.push_back(translate(c10::IValue(), Kind::Generator, call, draws));

    // 4. Launch.
    tpuc_op_call c{};
    c.op = info.native;
    c.device = call.device;
    c.args = call.args.data();
    c.nargs = static_cast<int>(call.args.size());
    c.tensors = call.tensors.data();
    c.ntensors = static_cast<int>(call.tensors.size());
    c.outputs = call.outputs.data();
    c.noutputs = static_cast<int>(call.outputs.size());
    tpuc_status* st = tpuc_op_run(runtime(), &c, launch_blocking());
    if (st && (tpuc_status_code(st) == TPUC_ERR_UNIMPLEMENTED ||
               tpuc_status_code(st) == TPUC_ERR_NOT_COMPILED)) {
      *compiling = tpuc_status_code(st) == TPUC_ERR_NOT_COMPILED;
      if (!*compiling) why = std::string("the lowering declined: ") + tpuc_status_message(st);
      tpuc_status_destroy(st);
      return false;
    }
    check(st, nullptr);  // the core's message names the op

    torch::jit::drop(*stack, nargs);
    for (auto& r : results) stack->push_back(std::move(r));
    return true;
  } catch (const NotNative& e) {
    why = e.why;
    return false;
  }
}

// dst <- src (both on one tpu device) through the core's "aten::copy_":
// conversion, broadcasting and strided destinations on the device. False when
// the core cannot take it (no such lowering, a conj/neg bit, a dtype).
bool core_copy(const at::Tensor& dst, const at::Tensor& src) {
  static const tpuc_op* copy_op = [] {
    tpuc_runtime* rt = runtime_or_null();
    return rt ? tpuc_op_find(rt, "aten::copy_") : nullptr;
  }();
  if (!copy_op || !native_enabled() || !dst.is_privateuseone() || !src.is_privateuseone() ||
      dst.device() != src.device())
    return false;
  tpuc_tensor ts[2]{};
  if (!describe(dst, &ts[0]) || !describe(src, &ts[1])) return false;
  tpuc_arg args[3]{};
  args[0].kind = TPUC_ARG_TENSOR;
  args[0].tensors.first = 0;
  args[0].tensors.count = 1;
  args[1].kind = TPUC_ARG_TENSOR;
  args[1].tensors.first = 1;
  args[1].tensors.count = 1;
  args[2].kind = TPUC_ARG_BOOL;
  args[2].i = 0;
  tpuc_op_call c{};
  c.op = copy_op;
  c.device = dst.device().index();
  c.args = args;
  c.nargs = 3;
  c.tensors = ts;
  c.ntensors = 2;
  c.outputs = &ts[0];
  c.noutputs = 1;
  tpuc_status* st = tpuc_op_run(runtime(), &c, launch_blocking());
  if (st && (tpuc_status_code(st) == TPUC_ERR_UNIMPLEMENTED ||
             tpuc_status_code(st) == TPUC_ERR_NOT_COMPILED)) {  // (host-first: via the host)
    tpuc_status_destroy(st);
    return false;
  }
  check(st, nullptr);
  return true;
}

}  // namespace tpuc_torch
