// The stand-in `npu` device: torch's PrivateUse1 backend (renamed "npu" from Python) whose
// memory is host memory and whose operators run torch's own CPU kernels.
//
// Every operator without a kernel here reaches `run_on_host`: it hands the CPU kernel host
// tensors that view the npu tensors' own memory (no copies), and gives the results back as
// npu tensors (fresh outputs adopt the CPU kernel's memory). Like a real device, it refuses
// operands on two devices. Built by devicekit/simulate/build.py with torch.utils.cpp_extension.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

std::atomic<c10::DeviceIndex> device_count{2};
thread_local c10::DeviceIndex current_index = 0;

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count.load(), "Invalid device id: npu:",
              static_cast<int>(index), " (", static_cast<int>(device_count.load()),
              " visible)");
}

// -- memory: host memory, tagged with the npu device it belongs to, and counted -------------

constexpr int kMaxDevices = 64;

// Bytes in use and their peak, per device, as a device's allocator reports them; past
// `capacity` (0: none) an allocation fails with torch's OutOfMemoryError, as on a device.
struct Usage {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
};
Usage usage[kMaxDevices];
std::atomic<int64_t> capacity{0};

std::string format_size(int64_t nbytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2);
  if (nbytes < (int64_t{1} << 20)) {
    text << static_cast<double>(nbytes) / 1024 << " KiB";
  } else if (nbytes < (int64_t{1} << 30)) {
    text << static_cast<double>(nbytes) / (1 << 20) << " MiB";
  } else {
    text << static_cast<double>(nbytes) / (1 << 30) << " GiB";
  }
  return text.str();
}

// Count `nbytes` more on device `index`, or refuse them in the words torch_npu uses.
void take(c10::DeviceIndex index, int64_t nbytes) {
  Usage& used = usage[index];
  const int64_t now = used.current.fetch_add(nbytes) + nbytes;
  const int64_t limit = capacity.load();
  if (limit > 0 && now > limit) {
    used.current.fetch_sub(nbytes);
    const int64_t before = now - nbytes;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory. Tried to allocate ",
                     format_size(nbytes), " (NPU ", static_cast<int>(index), "; ",
                     format_size(limit), " total capacity; ", format_size(before),
                     " already allocated; ", format_size(limit - before),
                     " free; the stand-in's capacity, DEVICEKIT_SIMULATE_MEMORY)");
  }
  int64_t peak = used.peak.load();
  while (now > peak && !used.peak.compare_exchange_weak(peak, now)) {
  }
}

void give_back(c10::DeviceIndex index, int64_t nbytes) { usage[index].current.fetch_sub(nbytes); }

struct Block {
  void* data;
  int64_t nbytes;
  c10::DeviceIndex index;
};

void free_block(void* context) {
  auto* block = static_cast<Block*>(context);
  c10::free_cpu(block->data);
  give_back(block->index, block->nbytes);
  delete block;
}

void free_nothing(void*) {}

struct HostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device device(kNpu, current_index);
    if (nbytes == 0) {
      return {nullptr, nullptr, &free_nothing, device};
    }
    take(current_index, static_cast<int64_t>(nbytes));
    void* data = c10::alloc_cpu(nbytes);
    return {data, new Block{data, static_cast<int64_t>(nbytes), current_index}, &free_block,
            device};
  }
  // Each allocation carries its size and device for the count: no raw deleter.
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

// Never destroyed: tensors and torch's own threads may still use it while the process exits.
HostAllocator& allocator = *new HostAllocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

struct Adopted {
  c10::Storage host;
  c10::DeviceIndex index;
};

void release_storage(void* context) {
  auto* adopted = static_cast<Adopted*>(context);
  give_back(adopted->index, static_cast<int64_t>(adopted->host.nbytes()));
  delete adopted;
}

// An npu storage over memory a CPU kernel allocated: it keeps that CPU storage alive, and
// counts on the device as if the device had allocated it.
c10::Storage adopt_storage(const c10::Storage& host, c10::DeviceIndex index) {
  take(index, static_cast<int64_t>(host.nbytes()));
  c10::DataPtr data(const_cast<void*>(host.data()), new Adopted{host, index}, &release_storage,
                    c10::Device(kNpu, index));
  return c10::Storage(c10::Storage::use_byte_size_t(), host.nbytes(), std::move(data),
                      &allocator, /*resizable=*/true);
}

// `storage` over `nbytes` of new memory holding what fits of its old bytes: what
// `untyped_storage().resize_(n)` does on a device (FSDP2 frees its gathered parameters so,
// with n = 0).
void reallocate_storage(const c10::Storage& storage, size_t nbytes) {
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = allocator.allocate(nbytes);
  const size_t kept = std::min(nbytes, storage.nbytes());
  if (kept > 0) {
    std::memcpy(fresh.get(), storage.data(), kept);
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

// A tensor's storage grows to hold `nbytes`, and never shrinks (torch's resize_).
void resize_storage(const c10::Storage& storage, size_t nbytes) {
  if (nbytes > storage.nbytes()) {
    reallocate_storage(storage, nbytes);
  }
}

// A CPU tensor over the same memory as npu tensor `t`, with its sizes, strides and offset.
at::Tensor host_view(const at::Tensor& t) {
  const c10::Storage& storage = t.storage();
  c10::Storage host(c10::Storage::use_byte_size_t(), storage.nbytes(),
                    c10::DataPtr(const_cast<void*>(storage.data()), c10::Device(c10::kCPU)),
                    c10::GetCPUAllocator(), /*resizable=*/true);
  auto view = at::detail::make_tensor<c10::TensorImpl>(
      std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(),
                                                    t.storage_offset());
  return view;
}

// An npu tensor with `host`'s sizes, strides and offset over npu storage `storage`.
at::Tensor npu_tensor(c10::Storage storage, const at::Tensor& host) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                      host.storage_offset());
  return tensor;
}

// -- the device: index per thread, one stream, no events ------------------------------------

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return {kNpu, current_index}; }
  void setDevice(c10::Device device) const override {
    check_index(device.index());
    current_index = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    current_index = device.index();
  }
  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getDefaultStream(c10::Device device) const override { return getStream(device); }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return getStream(device);
  }
  c10::Stream getNewStream(c10::Device device, int) const override { return getStream(device); }
  c10::Stream exchangeStream(c10::Stream stream) const override { return stream; }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count.load(); }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count.load() > 0; }
  // Kernels are the CPU's, so random numbers come from the CPU's generator.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override { return {kNpu, current_index}; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count.load(); }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_index(index);
    current_index = index;
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_index; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    c10::DeviceIndex previous = current_index;
    setCurrentDevice(index);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    reallocate_storage(storage, nbytes);
  }
};

// -- kernels the boxed path cannot serve: factories, copies, views, storage ------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device,
                               std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNpu, current_index)));
  return at::detail::empty_generic(size, &allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device> device, std::optional<bool>) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNpu, current_index)));
  return at::detail::empty_strided_generic(size, stride, &allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor host_of(const at::Tensor& t) { return t.device().type() == kNpu ? host_view(t) : t; }

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  host_of(dst).copy_(host_of(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(sizes);
  const size_t nbytes = at::detail::computeStorageNbytesContiguous(
      sizes, self.dtype().itemsize(), self.storage_offset());
  resize_storage(self.storage(), nbytes);
  if (memory_format.has_value()) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, offset);
  const size_t nbytes = at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(),
                                                         offset);
  resize_storage(self.storage(), nbytes);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source,
                                      c10::SymInt offset, c10::SymIntArrayRef size,
                                      c10::SymIntArrayRef stride) {
  return set_storage(self, std::move(source), offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                     C10_AS_INTARRAYREF_SLOW(stride));
}

void record_stream(at::Tensor&, c10::Stream) {}

// As torch_npu registers it: a dense npu tensor and a dense CPU one may swap their
// contents in place (`param.data = npu_tensor`), so that Module.npu() keeps its Parameter
// objects, as Module.cuda() does, and an optimizer built before the move still holds them.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.device().is_privateuseone());
  };
  return dense(self) && dense(from);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

// -- every other operator: torch's CPU kernel on host views ----------------------------------

struct Operands {
  std::optional<c10::Device> device;  // the device of the op's first npu tensor
  std::vector<std::pair<at::Tensor, at::Tensor>> views;  // (host view, npu tensor)
};

[[noreturn]] void two_devices(const c10::Device& a, const c10::Device& b,
                              const c10::OperatorHandle& op, const std::string& argument) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", a, " and ", b, "! (when checking argument ", argument, " of ",
              op.schema().operator_name(), ")");
}

// The first npu device among the arguments, then a refusal of any operand elsewhere: a CPU
// tensor with dimensions, or another npu index. CPU scalars and index lists (x[cpu_index])
// pass, as they do on a real device.
void check_devices(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   Operands& operands) {
  const auto& schema = op.schema().arguments();
  auto each_tensor = [&](auto&& visit) {
    for (size_t i = 0; i < args.size(); ++i) {
      const auto& arg = args[i];
      if (arg.isTensor()) {
        visit(arg.toTensor(), schema[i].name(), false);
      } else if (arg.isTensorList()) {
        for (const at::Tensor& t : arg.toTensorList().vec()) visit(t, schema[i].name(), false);
      } else if (arg.isList() && arg.toListRef().size() > 0 &&
                 schema[i].type()->kind() == c10::TypeKind::ListType) {
        for (const c10::IValue& item : arg.toListRef()) {
          if (item.isTensor()) visit(item.toTensor(), schema[i].name(), true);
        }
      }
    }
  };
  each_tensor([&](const at::Tensor& t, const std::string&, bool) {
    if (!operands.device && t.defined() && t.device().type() == kNpu) operands.device = t.device();
  });
  if (!operands.device) return;  // a factory asked for npu through its device argument
  each_tensor([&](const at::Tensor& t, const std::string& name, bool is_index) {
    if (!t.defined()) return;
    if (t.device().type() == kNpu) {
      if (t.device() != *operands.device) two_devices(*operands.device, t.device(), op, name);
    } else if (!is_index && t.dim() > 0) {
      two_devices(*operands.device, t.device(), op, name);
    }
  });
}

c10::IValue to_host(const c10::IValue& value, Operands& operands) {
  auto convert = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != kNpu) return t;
    at::Tensor host = host_view(t);
    operands.views.emplace_back(host, t);
    return host;
  };
  if (value.isTensor()) return convert(value.toTensor());
  if (value.isTensorList()) {
    auto list = value.toTensorList();
    c10::List<at::Tensor> hosts;
    hosts.reserve(list.size());
    for (const at::Tensor& t : list.vec()) hosts.push_back(convert(t));
    return hosts;
  }
  if (value.isList()) {
    auto list = value.toList();
    bool has_npu = false;
    for (const c10::IValue& item : list) {
      has_npu |= item.isTensor() && item.toTensor().defined() &&
                 item.toTensor().device().type() == kNpu;
    }
    if (!has_npu) return value;
    c10::impl::GenericList hosts(list.elementType());
    for (const c10::IValue& item : list) hosts.push_back(item.isTensor() ? convert(item.toTensor()) : item);
    return hosts;
  }
  if (value.isDevice() && value.toDevice().type() == kNpu) return c10::Device(c10::kCPU);
  return value;
}

// The npu tensor a CPU kernel's result stands for: the npu argument itself (in-place and
// out= results), a view of an npu argument's memory, or fresh memory adopted. A sparse
// result (EmbeddingBag's sparse gradient) has no memory of its own to adopt: it is made on
// the npu by the operators of the sparse npu key, whose fallback refuses (sparse.py).
at::Tensor to_npu(const at::Tensor& host, const Operands& operands) {
  if (!host.defined() || host.device().type() != c10::kCPU) return host;
  if (host.layout() != c10::kStrided) return host.to(host.options().device(*operands.device));
  for (const auto& [view, npu] : operands.views) {
    if (host.unsafeGetTensorImpl() == view.unsafeGetTensorImpl()) return npu;
  }
  const void* data = host.storage().data();
  for (const auto& [view, npu] : operands.views) {
    if (data != nullptr && data == view.storage().data()) return npu_tensor(npu.storage(), host);
  }
  return npu_tensor(adopt_storage(host.storage(), operands.device->index()), host);
}

// An npu argument the CPU kernel wrote: if the kernel resized it (new memory, new shape),
// the npu tensor takes the new memory and shape.
void write_back(const at::Tensor& npu, const at::Tensor& host) {
  auto* impl = npu.unsafeGetTensorImpl();
  if (host.storage().data() != npu.storage().data()) {
    impl->set_storage_keep_dtype(adopt_storage(host.storage(), npu.device().index()));
  }
  if (host.sizes() != npu.sizes() || host.strides() != npu.strides() ||
      host.storage_offset() != npu.storage_offset()) {
    impl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
  }
}

// Run `op` on host views of its npu arguments; with `wait`, wait for each result that a
// functional collective registered work for (c10d's wait_tensor) before it is handed back.
void run_on_host_then(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool wait) {
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t first = stack->size() - num_args;
  Operands operands;
  check_devices(op, c10::ArrayRef<c10::IValue>(*stack).slice(first), operands);
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (npu, host view)
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& arg = (*stack)[first + i];
    const auto* alias = schema.arguments()[i].alias_info();
    const bool is_write = alias != nullptr && alias->isWrite();
    c10::IValue host = to_host(arg, operands);
    if (is_write) {
      if (arg.isTensor() && arg.toTensor().defined() && arg.toTensor().device().type() == kNpu) {
        written.emplace_back(arg.toTensor(), host.toTensor());
      } else if (arg.isTensorList()) {
        auto npus = arg.toTensorList().vec();
        auto hosts = host.toTensorList().vec();
        for (size_t j = 0; j < npus.size(); ++j) {
          if (npus[j].device().type() == kNpu) written.emplace_back(npus[j], hosts[j]);
        }
      }
    }
    arg = std::move(host);
  }
  if (!operands.device) {  // e.g. a factory asked for npu through a device argument
    operands.device = c10::Device(kNpu, current_index);
  }
  c10::DeviceGuard guard(*operands.device);
  op.callBoxed(stack);
  const size_t num_returns = schema.returns().size();
  if (wait) {
    static const auto wait_tensor =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("_c10d_functional::wait_tensor", "")
            .typed<at::Tensor(const at::Tensor&)>();
    for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
      const c10::IValue& result = (*stack)[i];
      if (result.isTensor()) {
        wait_tensor.call(result.toTensor());
      } else if (result.isTensorList()) {
        for (const at::Tensor& t : result.toTensorList().vec()) wait_tensor.call(t);
      }
    }
  }
  for (const auto& [npu, host] : written) write_back(npu, host);
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    c10::IValue& result = (*stack)[i];
    if (result.isTensor()) {
      result = to_npu(result.toTensor(), operands);
    } else if (result.isTensorList()) {
      c10::List<at::Tensor> npus;
      for (const at::Tensor& t : result.toTensorList().vec()) npus.push_back(to_npu(t, operands));
      result = npus;
    }
  }
}

void run_on_host(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_on_host_then(op, stack, /*wait=*/false);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
}

// DTensor's collectives (torch.distributed._functional_collectives): their one kernel,
// for every device, asks the group for its backend for the tensors' device, and the
// stand-in's group has gloo's for the CPU only. So they run on host views too, and return
// once done: on this device every kernel has finished when it returns.
void collective_on_host(const c10::OperatorHandle& op, c10::DispatchKeySet,
                        torch::jit::Stack* stack) {
  run_on_host_then(op, stack, /*wait=*/true);
}

TORCH_LIBRARY_IMPL(_c10d_functional, PrivateUse1, m) {
  for (const char* name :
       {"all_gather_into_tensor", "all_gather_into_tensor_coalesced",
        "all_gather_into_tensor_out", "all_reduce", "all_reduce_", "all_reduce_coalesced",
        "all_reduce_coalesced_", "all_to_all_single", "broadcast", "broadcast_",
        "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&collective_on_host>());
  }
}

// Convolutions reach a device through these two, whose default kernels raise.
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> host_bias;
  if (bias.has_value() && bias->defined()) host_bias = host_of(*bias);
  at::Tensor out = at::convolution(host_of(input), host_of(weight), host_bias, stride, padding,
                                   dilation, transposed, output_padding, groups);
  return npu_tensor(adopt_storage(out.storage(), input.device().index()), out);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  const std::vector<int64_t> bias_sizes{grad_output.size(1)};
  auto grads = at::convolution_backward(host_of(grad_output), host_of(input), host_of(weight),
                                        bias_sizes, stride, padding, dilation, transposed,
                                        output_padding, groups, output_mask);
  auto adopt = [&](const at::Tensor& t) {
    return t.defined() ? npu_tensor(adopt_storage(t.storage(), input.device().index()), t) : t;
  };
  return {adopt(std::get<0>(grads)), adopt(std::get<1>(grads)), adopt(std::get<2>(grads))};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
}

// -- autocast("npu"): the op lists torch applies to CUDA ------------------------------------

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using at::autocast::CastPolicy;
using at::autocast::WrapFunction;

#define NPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(NPU_LOWER_PRECISION)
  AT_FORALL_FP32(NPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(NPU_PROMOTE)
}

}  // namespace

// DDP's step timing: the device computes on the host, so the host clock is its clock.
namespace c10d {
namespace {
struct HostTimer final : Timer {
  explicit HostTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    auto from = getTimestamp(start);
    auto to = getTimestamp(end);
    if (!from || !to || *to < *from) return std::nullopt;
    return *to - *from;
  }
};
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, HostTimer);
}  // namespace
}  // namespace c10d

void set_device_count(int64_t count) {
  TORCH_CHECK(count >= 0 && count <= kMaxDevices, "device count must be 0..", kMaxDevices,
              ", not ", count);
  device_count.store(static_cast<c10::DeviceIndex>(count));
}

void set_current_device(int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  current_index = static_cast<c10::DeviceIndex>(index);
}

int64_t get_current_device() { return current_index; }

int64_t get_device_count() { return device_count.load(); }

// A CPU tensor over an npu tensor's memory, for collectives that only take CPU tensors.
at::Tensor host_view_of(const at::Tensor& t) {
  TORCH_CHECK(t.device().type() == kNpu, "host_view: expected an npu tensor, got ", t.device());
  return host_view(t);
}

void set_capacity(int64_t nbytes) {
  TORCH_CHECK(nbytes >= 0, "capacity must be >= 0 bytes (0: none), not ", nbytes);
  capacity.store(nbytes);
}

int64_t get_capacity() { return capacity.load(); }

// (bytes in use, their peak) on device `index`.
std::pair<int64_t, int64_t> memory_usage(int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  return {usage[index].current.load(), usage[index].peak.load()};
}

void reset_peak(int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  usage[index].peak.store(usage[index].current.load());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  at::RegisterPrivateUse1HooksInterface(new Hooks);  // never destroyed, as the allocator
  m.def("set_device_count", &set_device_count);
  m.def("set_current_device", &set_current_device);
  m.def("current_device", &get_current_device);
  m.def("device_count", &get_device_count);
  m.def("host_view", &host_view_of);
  m.def("set_capacity", &set_capacity);
  m.def("capacity", &get_capacity);
  m.def("memory_usage", &memory_usage);
  m.def("reset_peak", &reset_peak);
}
