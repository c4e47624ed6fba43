// A MetaSchedule trace as JSON text in one call, read from the Trace object itself: what tlp._tvm.trace_json
// otherwise gets from TVM's Trace::AsJSON (~1.5 us per instruction, mostly allocating FFI containers) and then
// converts to Python one FFI call per element. Compiled on first use with tvm_ffi.cpp.load_inline; it needs only
// tvm-ffi's headers: Trace, Instruction and InstructionKind are read through FFI reflection, by field name.
//
// Output: one line per instruction (its compact JSON, [kind, inputs, attrs, outputs]), then one line with the
// decisions ([[instruction index, decision], ...]); lines are separated by '\n', which compact JSON never
// contains. json.loads of the lines gives exactly to_plain(trace.as_json()) (TVM's Trace::AsJSON, whose naming
// of random variables and of inputs this follows), except that every IndexMap (TransformLayout's input and
// padding, TransformBlockLayout's attribute) is written as `placeholder` instead of its JSON graph: callers use it
// only where an index map's text cannot change the result (tlp._tvm.trace_json). Anything else AsJSON would
// write differently raises; the caller then takes TVM's path.
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/accessor.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <unordered_map>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

namespace {

using tvm::ffi::Any;
using tvm::ffi::Array;
using tvm::ffi::Function;
using tvm::ffi::Map;
using tvm::ffi::Object;
using tvm::ffi::Optional;
using tvm::ffi::String;

// `quoted`: AsJSON writes string inputs with their quotes, "\"main\"".
void WriteString(std::string* out, const char* data, size_t size, bool quoted = false) {
  out->append(quoted ? "\"\\\"" : "\"");
  for (size_t i = 0; i < size; ++i) {
    unsigned char c = static_cast<unsigned char>(data[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      out->append(buffer);
    } else {
      out->push_back(static_cast<char>(c));  // UTF-8 bytes pass through: valid JSON text
    }
  }
  out->append(quoted ? "\\\"\"" : "\"");
}

void WriteFloat(std::string* out, double value) {
  if (std::isnan(value)) {
    out->append("NaN");  // what Python's json reads back as float('nan')
  } else if (std::isinf(value)) {
    out->append(value > 0 ? "Infinity" : "-Infinity");
  } else {
    char buffer[32];
    int size = std::snprintf(buffer, sizeof(buffer), "%.17g", value);  // round-trips every double
    out->append(buffer, size);
    if (std::string_view(buffer, size).find_first_of(".en") == std::string_view::npos) out->append(".0");
  }
}

void WriteInt(std::string* out, int64_t value) {
  char buffer[24];
  out->append(buffer, std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(value)));
}

int32_t TypeIndexOf(const char* key) {
  TVMFFIByteArray bytes{key, std::strlen(key)};
  int32_t index = -1;
  if (TVMFFITypeKeyToIndex(&bytes, &index) != 0) return -1;  // a type this TVM does not have
  return index;
}

// The object types a trace holds, by type index (comparing indices, not type-key strings).
struct Types {
  int32_t int_imm = TypeIndexOf("ir.IntImm");
  int32_t float_imm = TypeIndexOf("ir.FloatImm");
  int32_t index_map = TypeIndexOf("tirx.IndexMap");
  int32_t block_rv = TypeIndexOf("s_tir.SBlockRV");
  int32_t loop_rv = TypeIndexOf("s_tir.LoopRV");
  int32_t var = TypeIndexOf("ir.Var");
  int32_t size_var = TypeIndexOf("ir.SizeVar");
  char RandomVariablePrefix(int32_t index) const {
    return index == block_rv ? 'b' : index == loop_rv ? 'l' : (index == var || index == size_var) ? 'v' : 0;
  }
};

const Types& types() {
  static const Types instance;
  return instance;
}

// Writes FFI values as JSON: the generic part (attributes, decisions) and, with ``inputs``, AsJSON's treatment of
// instruction inputs (random variables by name, strings quoted, None as the string "None").
class TraceWriter {
 public:
  explicit TraceWriter(String placeholder) : placeholder_(std::move(placeholder)) {}

  void Write(const Any& value, std::string* out, bool inputs = false) {
    switch (value.type_index()) {
      case TVMFFITypeIndex::kTVMFFINone:
        out->append(inputs ? "\"None\"" : "null");
        return;
      case TVMFFITypeIndex::kTVMFFIBool:
        out->append(value.cast<bool>() ? "true" : "false");
        return;
      case TVMFFITypeIndex::kTVMFFIInt:
        WriteInt(out, value.cast<int64_t>());
        return;
      case TVMFFITypeIndex::kTVMFFIFloat:
        WriteFloat(out, value.cast<double>());
        return;
      case TVMFFITypeIndex::kTVMFFISmallStr:
      case TVMFFITypeIndex::kTVMFFIStr: {
        String text = value.cast<String>();
        WriteString(out, text.data(), text.size(), inputs);
        return;
      }
      case TVMFFITypeIndex::kTVMFFIArray: {
        const auto* items = value.as<tvm::ffi::ArrayObj>();
        out->push_back('[');
        bool first = true;
        for (const Any& item : *items) {
          if (!first) out->push_back(',');
          first = false;
          Write(item, out, inputs);
        }
        out->push_back(']');
        return;
      }
      case TVMFFITypeIndex::kTVMFFIMap:
        WriteMap(value, out);  // AsJSON puts a map input back as it is
        return;
      default:
        WriteObject(value, out, inputs);
    }
  }

  // An instruction's outputs get AsJSON's names: b/l/v + the count of random variables named before.
  void WriteOutputs(const Any& value, std::string* out) {
    out->push_back('[');
    bool first = true;
    for (const Any& output : *value.as<tvm::ffi::ArrayObj>()) {
      if (!first) out->push_back(',');
      first = false;
      const Object* object = output.as<Object>();
      std::string name;
      if (object == nullptr) {
        name = "_";
      } else {
        char prefix = types().RandomVariablePrefix(object->type_index());
        if (!prefix) TVM_FFI_THROW(TypeError) << "trace_text: unknown random variable " << object->GetTypeKey();
        name = prefix + std::to_string(names_.size());
      }
      if (!names_.emplace(object, name).second) TVM_FFI_THROW(ValueError) << "trace_text: " << name << " twice";
      WriteString(out, name.data(), name.size());
    }
    out->push_back(']');
  }

 private:
  void WriteMap(const Any& value, std::string* out) {
    // to_plain sorts a map's entries by the text of their keys.
    Map<Any, Any> items = value.cast<Map<Any, Any>>();
    std::vector<std::pair<std::string, Any>> entries;
    for (const auto& kv : items) {
      std::string key;
      if (auto text = kv.first.as<String>()) {
        key = std::string(text.value());
      } else {
        Write(kv.first, &key);
      }
      entries.emplace_back(std::move(key), kv.second);
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out->push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out->push_back(',');
      WriteString(out, entries[i].first.data(), entries[i].first.size());
      out->push_back(':');
      Write(entries[i].second, out);
    }
    out->push_back('}');
  }

  void WriteObject(const Any& value, std::string* out, bool inputs) {
    const Object* object = value.as<Object>();
    if (object == nullptr) {
      TVM_FFI_THROW(TypeError) << "trace_text: unsupported value of type index " << value.type_index();
    }
    const Types& t = types();
    int32_t index = object->type_index();
    if (index == t.int_imm) {
      static const tvm::ffi::reflection::FieldGetter int_value("ir.IntImm", "value");
      WriteInt(out, int_value(object).cast<int64_t>());
    } else if (index == t.float_imm) {
      static const tvm::ffi::reflection::FieldGetter float_value("ir.FloatImm", "value");
      WriteFloat(out, float_value(object).cast<double>());
    } else if (index == t.index_map) {
      WriteString(out, placeholder_.data(), placeholder_.size());
    } else if (inputs && t.RandomVariablePrefix(index)) {
      auto it = names_.find(object);
      if (it == names_.end()) TVM_FFI_THROW(IndexError) << "trace_text: random variable not defined";
      WriteString(out, it->second.data(), it->second.size());
    } else {
      TVM_FFI_THROW(TypeError) << "trace_text: unsupported object " << object->GetTypeKey();
    }
  }

  String placeholder_;
  std::unordered_map<const Object*, std::string> names_;
};

}  // namespace

String trace_text(Any trace, String placeholder) {
  using tvm::ffi::reflection::FieldGetter;
  static const int32_t trace_type = TypeIndexOf("s_tir.Trace");
  static const FieldGetter trace_insts("s_tir.Trace", "insts");
  static const FieldGetter trace_decisions("s_tir.Trace", "decisions");
  static const FieldGetter inst_kind("s_tir.Instruction", "kind");
  static const FieldGetter inst_inputs("s_tir.Instruction", "inputs");
  static const FieldGetter inst_attrs("s_tir.Instruction", "attrs");
  static const FieldGetter inst_outputs("s_tir.Instruction", "outputs");
  static const FieldGetter kind_name("s_tir.InstructionKind", "name");
  const Object* trace_object = trace.as<Object>();
  if (trace_object == nullptr || trace_object->type_index() != trace_type) {
    TVM_FFI_THROW(TypeError) << "trace_text: expected a s_tir.Trace";
  }
  Any insts = trace_insts(trace_object);
  Map<Any, Any> decisions = trace_decisions(trace_object).cast<Map<Any, Any>>();
  TraceWriter writer(std::move(placeholder));
  std::string out, decided = "[";
  out.reserve(4096);
  int64_t position = 0;
  for (const Any& inst_any : *insts.as<tvm::ffi::ArrayObj>()) {
    const Object* inst = inst_any.as<Object>();
    String kind = kind_name(inst_kind(inst).as<Object>()).cast<String>();
    // TransformLayout / TransformBlockLayout are the kinds with their own AttrsAsJSON: it writes their index
    // maps (padding / attribute) as JSON graphs, which become the placeholder here like every index map.
    out.push_back('[');
    WriteString(&out, kind.data(), kind.size());
    out.push_back(',');
    writer.Write(inst_inputs(inst), &out, /*inputs=*/true);
    out.push_back(',');
    writer.Write(inst_attrs(inst), &out);
    out.push_back(',');
    writer.WriteOutputs(inst_outputs(inst), &out);
    out.append("]\n");
    auto decision = decisions.find(inst_any);
    if (decision != decisions.end() && (*decision).second != nullptr) {
      if (decided.size() > 1) decided.push_back(',');
      decided.push_back('[');
      WriteInt(&decided, position);
      decided.push_back(',');
      writer.Write((*decision).second, &decided);
      decided.push_back(']');
    }
    ++position;
  }
  decided.push_back(']');
  out.append(decided);
  return String(out);
}
