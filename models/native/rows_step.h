// The in-place decoder step (speechpipe, issue 42): `RowsDense`, its AVX2 kernel, and
// `RowsWhisperDecoder`, CTranslate2's Whisper decoder whose single steps use it. Included
// by ct2_prefill.cc only (one translation unit: everything here is in an anonymous
// namespace), against the same vendored CTranslate2 headers (third_party/).

#pragma once

#include <immintrin.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ctranslate2/layers/common.h"
#include "ctranslate2/layers/whisper.h"
#include "ctranslate2/models/model.h"
#include "ctranslate2/ops/ops.h"
#include "ctranslate2/storage_view.h"

namespace {

  using namespace ctranslate2;

  // ---------------------------------------------------------------------------------------
  // A decoder step whose int8 matrix products read the weights in place (issue 42).
  //
  // CTranslate2 multiplies int8 matrices with oneDNN on every non-Intel x86 CPU. oneDNN's
  // int8 matrix-vector kernel exists only for AVX-512; on an AVX2 CPU each product runs its
  // general GEMM, which first copies the whole weight matrix into its packed layout: 83 % of
  // a live decoder step (1-10 rows) goes to that copy (docs/design.md, "The CPU decides what
  // a decoder step costs"). `RowsGemm` multiplies a few rows by the weights as they are
  // stored. It is exact: every product and sum is an integer (|x|, |w| <= 127 keep
  // `vpmaddubsw`'s 16-bit pair sums below saturation), so the int32 results equal oneDNN's,
  // and everything around the products (quantization, dequantization, layer norms,
  // attention, softmax) is CTranslate2's own ops in CTranslate2's order: the logits are
  // the same bits. Tests compare the ids and scores with CTranslate2's step.

  // c[r, j] = sum_k x[r, k] * w[j, k]: x is `rows` x `depth` (u8 shifted by 128 when
  // `shifted`, else s8), w is `cols` x `depth` (s8, never -128), c is `rows` x `cols`.
  void rows_gemm_scalar(const int8_t* x, bool shifted, dim_t rows, dim_t depth,
                        const int8_t* w, dim_t cols, int32_t* c) {
    std::vector<int32_t> xs(rows * depth);
    for (dim_t i = 0; i < rows * depth; ++i)
      xs[i] = shifted ? int32_t(uint8_t(x[i])) - 128 : int32_t(x[i]);
    for (dim_t j = 0; j < cols; ++j)
      for (dim_t r = 0; r < rows; ++r) {
        int32_t sum = 0;
        for (dim_t k = 0; k < depth; ++k)
          sum += xs[r * depth + k] * int32_t(w[j * depth + k]);
        c[r * cols + j] = sum;
      }
  }

  __attribute__((target("avx2")))
  inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
  }

  // NR rows against one weight row: signs and magnitudes of x are precomputed
  // (`xs`, `xa`: `depth` bytes per row), so x * w = |x| * (w with the sign of x).
  template <int NR>
  __attribute__((target("avx2")))
  inline void rows_dot_avx2(const int8_t* xs, const int8_t* xa, dim_t depth,
                            const int8_t* w, int32_t* out, dim_t stride) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[NR];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; ++r)
      acc[r] = _mm256_setzero_si256();
    for (dim_t k = 0; k < depth; k += 32) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
      #pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + r * depth + k));
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa + r * depth + k));
        const __m256i p = _mm256_maddubs_epi16(a, _mm256_sign_epi8(wv, s));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, ones));
      }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < NR; ++r)
      out[r * stride] = hsum_epi32(acc[r]);
  }

  __attribute__((target("avx2")))
  void rows_gemm_avx2(const int8_t* x, bool shifted, dim_t rows, dim_t depth,
                      const int8_t* w, dim_t cols, int32_t* c) {
    // (a std::vector of __m256i would drop the type's 32-byte alignment: bytes, unaligned
    // loads)
    std::vector<int8_t> xs(rows * depth), xa(rows * depth);
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    for (dim_t i = 0; i < rows * depth; i += 32) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
      if (shifted)
        v = _mm256_xor_si256(v, flip);  // u8 - 128, as s8
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs.data() + i), v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xa.data() + i), _mm256_abs_epi8(v));
    }
    // one weight row at a time, up to four rows of x against it (measured on an AVX2 EPYC:
    // four columns per pass, or five to six rows, ran 1.1-1.4x slower; one weight row
    // streams from memory in order)
    for (dim_t j = 0; j < cols; ++j) {
      const int8_t* wj = w + j * depth;
      dim_t r = 0;
      for (; r + 4 <= rows; r += 4)
        rows_dot_avx2<4>(&xs[r * depth], &xa[r * depth], depth, wj, c + r * cols + j, cols);
      switch (rows - r) {
      case 3: rows_dot_avx2<3>(&xs[r * depth], &xa[r * depth], depth, wj, c + r * cols + j, cols); break;
      case 2: rows_dot_avx2<2>(&xs[r * depth], &xa[r * depth], depth, wj, c + r * cols + j, cols); break;
      case 1: rows_dot_avx2<1>(&xs[r * depth], &xa[r * depth], depth, wj, c + r * cols + j, cols); break;
      default: break;
      }
    }
  }

  bool cpu_has_avx2() {
    static const bool has = __builtin_cpu_supports("avx2");
    return has;
  }

  // The stored int8 weights of one linear layer, multiplied in place. The weight, its
  // scales and bias are the model's (or a restricted output layer's gathered rows): no copy.
  class RowsDense {
  public:
    RowsDense(const StorageView& weight, const StorageView& qscale, const StorageView* bias,
              bool shift_input, bool round_before_cast, bool global_scale,
              const ops::ActivationType* activation)
      : _weight(weight)
      , _qscale(qscale)
      , _bias(bias)
      , _shifted(shift_input)
      , _quantize(global_scale ? ops::Quantize::ScaleType::GLOBAL
                               : ops::Quantize::ScaleType::PER_LAYER,
                  shift_input, round_before_cast)
      , _dequantize(activation) {
      if (weight.dtype() != DataType::INT8 || weight.rank() != 2)
        throw std::invalid_argument("RowsDense: not a 2-D int8 weight");
      const int8_t* w = weight.data<int8_t>();
      // -128 has no magnitude in s8: the sign trick would be wrong (CTranslate2 quantizes to
      // [-127, 127], so this does not happen with its converter)
      for (dim_t i = 0; i < weight.size(); ++i)
        if (w[i] == -128)
          throw std::invalid_argument("RowsDense: a weight of -128");
    }

    dim_t depth() const { return _weight.dim(1); }

    void operator()(const StorageView& input, StorageView& output,
                    const StorageView* residual = nullptr) const {
      const dim_t depth = _weight.dim(1), cols = _weight.dim(0);
      if (input.dim(-1) != depth)
        throw std::invalid_argument("RowsDense: input depth");
      const dim_t rows = input.size() / depth;
      StorageView qinput(DataType::INT8, input.device());
      StorageView qinput_scale(_qscale.dtype(), input.device());
      StorageView qoutput(DataType::INT32, input.device());
      _quantize(input, qinput, qinput_scale);
      Shape shape = input.shape();
      shape.back() = cols;
      qoutput.resize(shape);
      if (depth % 32 == 0 && cpu_has_avx2())
        rows_gemm_avx2(qinput.data<int8_t>(), _shifted, rows, depth, _weight.data<int8_t>(),
                       cols, qoutput.data<int32_t>());
      else
        rows_gemm_scalar(qinput.data<int8_t>(), _shifted, rows, depth, _weight.data<int8_t>(),
                         cols, qoutput.data<int32_t>());
      _dequantize(qoutput, qinput_scale, _qscale, /*trans_a=*/false, /*trans_b=*/true, output,
                  _bias);
      if (residual)
        ops::Add()(*residual, output, output);
    }

  private:
    const StorageView& _weight;
    const StorageView& _qscale;
    const StorageView* _bias;
    const bool _shifted;
    const ops::Quantize _quantize;
    const ops::Dequantize _dequantize;
  };

  // The in-place layer of a linear layer of `model` (its stored weight, scales and bias; the
  // input shifted to u8 where CTranslate2 shifts it, i.e. where it keeps a compensation).
  std::unique_ptr<RowsDense> rows_dense(const models::Model& model, const std::string& scope,
                                        const ops::ActivationType* activation) {
    const StorageView* weight = model.get_variable_if_exists(scope + "/weight");
    const StorageView* qscale = model.get_variable_if_exists(scope + "/weight_scale");
    if (!weight || !qscale || weight->dtype() != DataType::INT8)
      throw std::invalid_argument(scope + ": no unpacked int8 weight");
    const bool shift = model.get_variable_if_exists(scope + "/weight_compensation") != nullptr;
    return std::make_unique<RowsDense>(*weight, *qscale,
                                       model.get_variable_if_exists(scope + "/bias"), shift,
                                       model.round_before_cast_in_quantization(),
                                       model.use_global_int16_scale(), activation);
  }

  // A restricted output layer's gathered rows live in `Dense`'s private members; read them
  // through an explicit instantiation (which may name private members) instead of a second
  // copy of 15 MB per decoder.
  template <typename Tag, typename Tag::type Member>
  struct Expose {
    friend typename Tag::type get(Tag) { return Member; }
  };
  struct DensePartialWeight { using type = StorageView layers::Dense::*; friend type get(DensePartialWeight); };
  struct DensePartialQscale { using type = StorageView layers::Dense::*; friend type get(DensePartialQscale); };
  struct DensePartialBias { using type = StorageView layers::Dense::*; friend type get(DensePartialBias); };
  template struct Expose<DensePartialWeight, &layers::Dense::_partial_weight>;
  template struct Expose<DensePartialQscale, &layers::Dense::_partial_qscale>;
  template struct Expose<DensePartialBias, &layers::Dense::_partial_bias>;

  // CTranslate2's Whisper decoder whose single steps (`operator()` with a step: what the
  // beam search calls) run their linear layers through `RowsDense` when a step has at most
  // `max_rows` rows; the prompt pass, wider steps and anything this does not know take
  // CTranslate2's own path. The step is `TransformerDecoder::decode` for one position of a
  // pre-norm decoder (the vendored CTranslate2's src/layers/transformer.cc and attention.cc),
  // op for op.
  class RowsWhisperDecoder : public layers::WhisperDecoder {
  public:
    RowsWhisperDecoder(const models::Model& model, const std::string& scope, dim_t max_rows)
      : layers::WhisperDecoder(model, scope)
      , _model(model)
      , _scope(scope)
      , _max_rows(max_rows)
      , _activation(model.get_enum_value<ops::ActivationType>(scope + "/activation")) {
      if (_max_rows <= 0)
        return;
      std::string why;
      if (_start_from_zero_embedding || _project_in || _project_out || _alibi
          || !_position_encoder || !_output_norm || _outputs_scale || _sliding_window
          || _use_flash_attention || _final_logit_softcapping != 0.f || !_with_encoder_attention)
        why = "a decoder feature the step does not implement";
      for (size_t l = 0; why.empty() && l < _layers.size(); ++l) {
        const std::string s = scope + "/layer_" + std::to_string(l);
        for (const char* extra : {"/shared_layer_norm", "/input_layer_norm",
                                  "/post_attention_layer_norm", "/pre_feedforward_layer_norm",
                                  "/post_feedforward_layer_norm",
                                  "/external_pre_encoder_attention_layer_norm",
                                  "/ffn/linear_0_noact", "/self_attention/relative_position_keys",
                                  "/self_attention/relative_attention_bias",
                                  "/self_attention/q_norm", "/self_attention/k_norm"})
          if (model.layer_exists(s + extra) || model.get_variable_if_exists(s + extra))
            why = std::string("the decoder has ") + extra;
        if (model.get_attribute_with_default<float>(s + "/layer_scalar", 1.f) != 1.f
            || model.get_flag_with_default(s + "/self_attention/multi_query", false)
            || model.get_attribute_with_default<int32_t>(s + "/self_attention/num_heads_kv", 0))
          why = "the decoder's attention is not plain multi-head";
        if (!model.get_flag_with_default(scope + "/pre_norm", true))
          why = "a post-norm decoder";
      }
      try {
        for (size_t l = 0; why.empty() && l < _layers.size(); ++l)
          _steps.push_back(build_layer(scope + "/layer_" + std::to_string(l)));
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (!why.empty()) {
        _steps.clear();
        _max_rows = 0;
        _refused = why;
      }
    }

    // after `update_output_layer`: the output layer's (gathered) rows
    void bind_output_layer() {
      _output.reset();
      if (_max_rows <= 0)
        return;
      try {
        layers::Dense& proj = output_layer();
        const StorageView& partial_weight = proj.*get(DensePartialWeight());
        const StorageView& partial_qscale = proj.*get(DensePartialQscale());
        const StorageView& partial_bias = proj.*get(DensePartialBias());
        const std::string p = _scope + "/projection";
        const StorageView* weight = _model.get_variable_if_exists(p + "/weight");
        const StorageView* qscale = _model.get_variable_if_exists(p + "/weight_scale");
        const StorageView* bias = _model.get_variable_if_exists(p + "/bias");
        if (!weight || !qscale)
          throw std::invalid_argument("no int8 projection weight");
        const bool shift = _model.get_variable_if_exists(p + "/weight_compensation") != nullptr;
        if (!partial_weight.empty()) {
          weight = &partial_weight;
          if (!qscale->is_scalar())
            qscale = &partial_qscale;
          if (!partial_bias.empty())
            bias = &partial_bias;
          else if (bias)
            throw std::invalid_argument("a projection bias not gathered");
        }
        _output = std::make_unique<RowsDense>(*weight, *qscale, bias, shift,
                                              _model.round_before_cast_in_quantization(),
                                              _model.use_global_int16_scale(), nullptr);
      } catch (const std::exception& e) {
        _steps.clear();
        _max_rows = 0;
        _refused = e.what();
      }
    }

    // why the rows step is off ("" when on, or when it was not asked for)
    const std::string& refused() const { return _refused; }
    bool rows_step() const { return _max_rows > 0 && _output; }
    size_t rows_steps_taken() const { return _taken; }

    void operator()(dim_t step, const StorageView& ids, layers::DecoderState& state,
                    StorageView* logits = nullptr, StorageView* attention = nullptr) override {
      if (!rows_step() || attention || !logits || step <= 0 || ids.rank() != 1
          || ids.dim(0) > _max_rows || state.count("memory") || state.count("memory_lengths")
          || ids.device() != Device::CPU || output_type() != DataType::FLOAT32) {
        layers::WhisperDecoder::operator()(step, ids, state, logits, attention);
        return;
      }
      ++_taken;
      step_forward(step, ids, state, *logits);
    }

  private:
    struct LayerStep {
      std::unique_ptr<layers::LayerNorm> self_norm, cross_norm, ffn_norm;
      std::unique_ptr<RowsDense> self_qkv, self_out, cross_q, cross_out, ff1, ff2;
      float self_scale = 1, cross_scale = 1;
      dim_t heads = 0;
    };

    std::unique_ptr<RowsDense> dense(const std::string& scope,
                                     const ops::ActivationType* activation) const {
      return rows_dense(_model, scope, activation);
    }

    LayerStep build_layer(const std::string& s) const {
      LayerStep layer;
      layer.heads = _num_heads;
      layer.self_norm = std::make_unique<layers::LayerNorm>(_model, s + "/self_attention/layer_norm");
      layer.cross_norm = std::make_unique<layers::LayerNorm>(_model, s + "/attention/layer_norm");
      layer.ffn_norm = std::make_unique<layers::LayerNorm>(_model, s + "/ffn/layer_norm");
      layer.self_qkv = dense(s + "/self_attention/linear_0", nullptr);
      layer.self_out = dense(s + "/self_attention/linear_1", nullptr);
      layer.cross_q = dense(s + "/attention/linear_0", nullptr);
      layer.cross_out = dense(s + "/attention/linear_2", nullptr);
      layer.ff1 = dense(s + "/ffn/linear_0", &_activation);
      layer.ff2 = dense(s + "/ffn/linear_1", nullptr);
      const dim_t d_model = layer.self_out->depth();
      for (const auto& [attn, scale] : {std::make_pair(std::string("/self_attention"), &layer.self_scale),
                                        std::make_pair(std::string("/attention"), &layer.cross_scale)}) {
        const dim_t d_head = _model.get_attribute_with_default<int32_t>(
          s + attn + "/head_dim", d_model / _num_heads);
        if (d_head * _num_heads != d_model)
          throw std::invalid_argument("head_dim * num_heads != d_model");
        *scale = _model.get_attribute_with_default<float>(
          s + attn + "/queries_scale", 1.f / std::sqrt(static_cast<float>(d_head)));
      }
      return layer;
    }

    // dot_product_attention of attention.cc without its options (no relative positions,
    // no alibi, no lengths mask, no attention returned)
    static void attend(const StorageView& queries, const StorageView& keys,
                       const StorageView& values, float scale, StorageView& output) {
      const ops::MatMul keys_matmul(/*trans_a=*/false, /*trans_b=*/true, scale);
      keys_matmul(queries, keys, output);
      StorageView attn(values.dtype(), values.device());
      attn = std::move(output);
      ops::SoftMax()(attn, nullptr, attn);
      const ops::MatMul values_matmul;
      values_matmul(attn, values, output);
    }

    void layer_step(const LayerStep& layer, const std::string& l, const StorageView& input,
                    layers::DecoderState& state, StorageView& output) const {
      const DataType dtype = input.dtype();
      const Device device = input.device();
      const dim_t batch = input.dim(0);
      const dim_t d_model = input.dim(2);
      const dim_t heads = layer.heads;
      static const ops::Transpose transpose_op({0, 2, 1, 3});

      // self-attention (MultiHeadAttention::operator(), one position, cache on)
      StorageView hidden(dtype, device), fused(dtype, device);
      StorageView queries(dtype, device), keys(dtype, device), values(dtype, device);
      (*layer.self_norm)(input, hidden);
      (*layer.self_qkv)(hidden, fused);
      fused.reshape({batch, 3 * heads, 1, d_model / heads});  // split_heads, time 1
      ops::Split(1)(fused, queries, keys, values);
      StorageView& cached_keys = state.at("self_keys_" + l);
      StorageView& cached_values = state.at("self_values_" + l);
      if (cached_keys.empty()) {
        cached_keys = std::move(keys);
        cached_values = std::move(values);
      } else {
        const ops::Concat concat_op(2);
        StorageView& tmp = fused;
        tmp = std::move(cached_keys);
        concat_op({&tmp, &keys}, cached_keys);
        tmp = std::move(cached_values);
        concat_op({&tmp, &values}, cached_values);
      }
      StorageView context(dtype, device);
      attend(queries, cached_keys, cached_values, layer.self_scale, context);
      context.reshape({batch, 1, d_model});  // combine_heads, time 1
      StorageView attended(dtype, device);
      (*layer.self_out)(context, attended, &input);

      // cross-attention on the cached memory keys (process_cross_attention, cache filled)
      const StorageView& memory_keys = state.at("memory_keys_" + l);
      const StorageView& memory_values = state.at("memory_values_" + l);
      StorageView cross_queries(dtype, device);
      (*layer.cross_norm)(attended, hidden);
      (*layer.cross_q)(hidden, cross_queries);
      const dim_t beam = batch / memory_keys.dim(0);
      if (beam > 1)
        cross_queries.reshape({batch / beam, beam, d_model});
      const dim_t time = cross_queries.dim(1);
      if (time == 1) {
        cross_queries.reshape({cross_queries.dim(0), heads, 1, d_model / heads});
      } else {
        cross_queries.reshape({cross_queries.dim(0), time, heads, d_model / heads});
        StorageView y(device, dtype);
        transpose_op(cross_queries, y);
        cross_queries = std::move(y);
      }
      attend(cross_queries, memory_keys, memory_values, layer.cross_scale, context);
      const dim_t context_rows = context.dim(0), context_time = context.dim(2);
      if (context_time > 1) {  // combine_heads
        StorageView y(device, dtype);
        transpose_op(context, y);
        context = std::move(y);
      }
      context.reshape({context_rows, context_time, d_model});
      if (beam > 1)
        context.reshape({batch, 1, d_model});
      StorageView crossed(dtype, device);
      (*layer.cross_out)(context, crossed, &attended);

      // feed-forward (FeedForwardNetwork::operator(), pre-norm)
      StorageView inner(dtype, device);
      (*layer.ffn_norm)(crossed, hidden);
      (*layer.ff1)(hidden, inner);
      (*layer.ff2)(inner, output, &crossed);
    }

    void step_forward(dim_t step, const StorageView& ids, layers::DecoderState& state,
                      StorageView& logits) {
      const DataType dtype = output_type();
      const Device device = ids.device();
      StorageView layer_in(dtype, device);
      StorageView layer_out(dtype, device);
      _embeddings(ids, layer_in);
      if (_embeddings_scale)
        ops::Mul()(layer_in, *_embeddings_scale, layer_in);
      if (layer_in.rank() == 2)
        layer_in.expand_dims(1);
      (*_position_encoder)(layer_in, step);
      if (_layernorm_embedding)
        (*_layernorm_embedding)(layer_in, layer_in);
      for (size_t l = 0; l < _steps.size(); ++l) {
        layer_step(_steps[l], std::to_string(l), layer_in, state, layer_out);
        layer_in = std::move(layer_out);
      }
      (*_output_norm)(layer_in, layer_in);
      (*_output)(layer_in, logits);
      logits.squeeze(1);
    }

    const models::Model& _model;
    const std::string _scope;
    dim_t _max_rows;
    const ops::ActivationType _activation;
    std::vector<LayerStep> _steps;
    std::unique_ptr<RowsDense> _output;
    std::string _refused;
    size_t _taken = 0;
  };

}  // namespace
