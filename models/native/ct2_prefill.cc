// Whisper decoding whose forced text prefix is read in one pass (speechpipe).
//
// CTranslate2's Whisper `generate` reads a forced text prefix one decoder step per token,
// and after the first step at the full beam width: 5 identical rows per item, 4 of them
// scored -1e10 (`update_sample_with_prefix`, src/decoding.cc). A streaming decode forces
// its committed words on every step, so those steps were 45 % of the decoder's work.
//
// `PrefillDecoder.generate` is the vendored CTranslate2's `WhisperReplica::generate` (same
// layers, same `decode`) with one change: the prompt pass (`forward_prompt`, one row per
// item, all positions at once) also reads the first `prefill_text` tokens of the forced
// prefix. The rest of the prefix (at least one token when there is a prefix) is still
// forced by `decode`, so the search starts the way it does today (the first free step
// penalises end-of-text in secondary beams). The search never scores forced tokens
// (CTranslate2 sets them to 0), so its hypotheses are the same; only the final ranking
// normalises by length, and `generate` counts the forced prefix in that length. So every
// finished hypothesis is returned and ranked here by `score / (prefix + new tokens)`, as
// `generate` ranks them. Tests compare it with `generate` on real clips.
//
// Built against the vendored headers of CTranslate2 (third_party/ctranslate2-*/; the version
// is named once, in its UPSTREAM file, and setup.py passes it as SPEECHPIPE_CT2_VERSION) and
// linked to the library of the ctranslate2 wheel of that version: the Python side loads it
// only when that exact version is the one imported (models/prefill.py).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#ifndef SPEECHPIPE_CT2_VERSION
#error "SPEECHPIPE_CT2_VERSION: the vendored CTranslate2's version, passed by setup.py"
#endif

#include "ctranslate2/decoding.h"
#include "ctranslate2/layers/common.h"
#include "ctranslate2/layers/transformer.h"
#include "ctranslate2/layers/whisper.h"
#include "ctranslate2/models/whisper.h"
#include "ctranslate2/ops/ops.h"
#include "ctranslate2/ops/softmax.h"
#include "ctranslate2/storage_view.h"
#include "ctranslate2/utils.h"

#include "rows_step.h"  // the in-place decoder step (RowsDense, RowsWhisperDecoder)

namespace py = pybind11;
using namespace ctranslate2;

namespace {

  // One loaded model per folder and compute type, shared by every decoder of that folder
  // (weights once): Whisper's and the translators'.
  std::shared_ptr<const models::Model> load_any_model(const std::string& path,
                                                      ComputeType compute_type) {
    static std::mutex lock;
    static std::map<std::pair<std::string, int>, std::weak_ptr<const models::Model>> loaded;
    std::lock_guard<std::mutex> guard(lock);
    const auto key = std::make_pair(path, int(compute_type));
    auto model = loaded[key].lock();
    if (!model) {
      model = models::Model::load(path, Device::CPU, 0, compute_type);
      loaded[key] = model;
    }
    return model;
  }

  std::shared_ptr<const models::WhisperModel> load_model(const std::string& path) {
    auto whisper = std::dynamic_pointer_cast<const models::WhisperModel>(
      load_any_model(path, ComputeType::INT8));
    if (!whisper)
      throw std::invalid_argument("not a Whisper model: " + path);
    return whisper;
  }

  struct Generated {
    std::vector<size_t> ids;  // the prefilled text tokens, then what `decode` returned
    float score;              // as generate's: sum of free log-probs / all text tokens
    float no_speech_prob;
  };

  // A decoder of one thread (CTranslate2 layers are not shared between threads: its
  // replicas each have their own, and `update_output_layer` changes the layer).
  class PrefillDecoder {
  public:
    // restrict_ids (sorted, unique; empty: the full vocabulary): the only tokens the output
    // layer scores, as CTranslate2's vocabulary maps do (`update_output_layer`): this
    // decoder gathers those rows of the shared output layer once (its own copy, 4 bytes
    // more per row than the int8 row), the model's weights stay shared. Ids in and out
    // stay the full vocabulary's; the forced tokens after the prompt pass must be kept
    // ones (decode would drop the others).
    // rows_step: the most rows a decoder step multiplies in place (`RowsDense`); 0: every
    // step is CTranslate2's
    PrefillDecoder(const std::string& path, size_t threads,
                   const std::vector<size_t>& restrict_ids, size_t rows_step = 0)
      : _threads(threads)
      , _model(load_model(path))
      , _decoder(std::make_unique<RowsWhisperDecoder>(*_model, "decoder", dim_t(rows_step))) {
      const auto& vocabulary = _model->get_vocabulary();
      _sot_id = vocabulary.bos_id();
      _eot_id = vocabulary.eos_id();
      _no_speech_id = vocabulary.to_id("<|nospeech|>");
      if (_no_speech_id == vocabulary.unk_id())
        _no_speech_id = vocabulary.to_id("<|nocaptions|>");
      for (const auto& id : _model->config["suppress_ids"])
        _suppress.push_back(id);
      for (size_t i = 1; i < restrict_ids.size(); ++i)
        if (restrict_ids[i] <= restrict_ids[i - 1])
          throw std::invalid_argument("restrict_ids must be sorted and unique");
      if (!restrict_ids.empty() && restrict_ids.back() >= vocabulary.size())
        throw std::invalid_argument("restrict_ids holds an id outside the vocabulary");
      const auto scoped_device_setter = _model->get_scoped_device_setter();
      _decoder->update_output_layer(_model->preferred_size_multiple(), restrict_ids);
      _decoder->bind_output_layer();
      for (const size_t id : {_sot_id, _eot_id, _no_speech_id})
        if (_decoder->output_layer_is_updated() && !_decoder->is_in_output(id))
          throw std::invalid_argument("restrict_ids must keep the special tokens");
      _no_speech_column = _decoder->to_output_word_id(_no_speech_id);
      _output_size = _decoder->output_size();
      if (_decoder->output_layer_is_updated()) {  // the bytes of the gathered rows
        const StorageView* weight = _model->get_variable_if_exists("decoder/projection/weight");
        if (!weight)
          weight = _model->get_variable_if_exists("decoder/embeddings/weight");
        const StorageView* scale =
          _model->get_variable_if_exists("decoder/projection/weight_scale");
        if (!scale)
          scale = _model->get_variable_if_exists("decoder/embeddings/weight_scale");
        size_t row = weight ? size_t(weight->dim(-1)) * weight->item_size() : 0;
        if (scale && !scale->is_scalar())
          row += scale->item_size();
        _output_bytes = _output_size * row;
      }
    }

    size_t output_size() const {
      return _output_size;
    }

    // bytes this decoder holds of its own: the gathered rows of a restricted output layer
    size_t output_bytes() const {
      return _output_bytes;
    }

    bool rows_step() const {
      return _decoder->rows_step();
    }

    // why the in-place step is off although asked for ("" otherwise)
    std::string rows_step_refused() const {
      return _decoder->refused();
    }

    size_t rows_steps_taken() const {
      return _decoder->rows_steps_taken();
    }

    // memory: encoder output (batch, frames, width), float32. prompts: whole prompts
    // (context, sot sequence, forced prefix), one per memory row; the first
    // `prompt_tokens` tokens of each are read in one pass (equal positions for all: the
    // same context length and sot sequence, and `prefill_text` prefix tokens each).
    // `max_steps`: decoder steps after the prompt pass (forced + new tokens).
    std::vector<Generated> generate(
        py::array_t<float, py::array::c_style | py::array::forcecast> memory,
        const std::vector<std::vector<size_t>>& prompts,
        size_t prompt_tokens, size_t sot_index, size_t beam_size, size_t max_steps,
        const std::vector<size_t>& suppress) {
      const size_t batch = prompts.size();
      if (memory.ndim() != 3 || size_t(memory.shape(0)) != batch)
        throw std::invalid_argument("memory must be (len(prompts), frames, width)");
      if (batch == 0)
        return {};
      std::vector<std::vector<size_t>> head, start;
      for (const auto& prompt : prompts) {
        if (prompt.size() <= prompt_tokens || prompt_tokens < sot_index + 3)
          throw std::invalid_argument("each prompt needs a token after its prompt pass");
        if (prompt[sot_index] != _sot_id)
          throw std::invalid_argument("<|startoftranscript|> is not at sot_index");
        head.emplace_back(prompt.begin(), prompt.begin() + prompt_tokens);
        start.emplace_back(prompt.begin() + prompt_tokens, prompt.end());
        if (_decoder->output_layer_is_updated())
          for (const size_t id : start.back())
            if (!_decoder->is_in_output(id))
              throw std::invalid_argument("a forced token is not in restrict_ids");
      }
      // text tokens that decode's hypotheses leave out: those read in the prompt pass and
      // the start token (the sot sequence is 4 tokens; prompt_tokens >= sot_index + 3)
      const size_t prefilled_text = prompt_tokens - (sot_index + 3);

      py::gil_scoped_release no_gil;
      set_num_threads(_threads);
      const auto scoped_device_setter = _model->get_scoped_device_setter();
      const Device device = Device::CPU;
      const DataType dtype = _decoder->output_type();

      layers::DecoderState state = _decoder->initial_state();
      Shape shape{memory.shape(0), memory.shape(1), memory.shape(2)};
      state.emplace("memory", StorageView(shape, const_cast<float*>(memory.data()), device));

      const StorageView inputs = layers::make_sequence_inputs(head, device);
      StorageView outputs(dtype, device);
      _decoder->forward_prompt(inputs, state, &outputs);

      // no-speech probability at <|startoftranscript|>, as generate computes it
      StorageView sot_positions({inputs.dim(0)}, int32_t(sot_index), device);
      StorageView logits(dtype, device);
      _decoder->compute_logits_for_steps(outputs, sot_positions, logits);
      StorageView probs(dtype, device);
      ops::SoftMax()(logits, probs);
      const StorageView probs32 = probs.to_float32();

      DecodingOptions options;
      options.start_step = inputs.dim(1);
      options.beam_size = beam_size;
      options.length_penalty = 1;
      options.max_length = max_steps;
      options.num_hypotheses = beam_size;  // all finished ones: ranked below
      options.return_scores = true;
      options.include_eos_in_hypotheses = false;
      options.disable_ids = _suppress;  // the model's, and the caller's (full ids both)
      options.disable_ids.insert(options.disable_ids.end(), suppress.begin(), suppress.end());
      std::vector<DecodingResult> results = decode(*_decoder, state, start, {_eot_id}, options);

      std::vector<Generated> out;
      out.reserve(batch);
      for (size_t i = 0; i < batch; ++i) {
        const auto& result = results[i];
        size_t best = 0;
        float best_score = -std::numeric_limits<float>::infinity();
        for (size_t h = 0; h < result.hypotheses.size(); ++h) {
          // decode's score is the sum over its hypothesis length; generate's is over the
          // whole forced prefix + new tokens
          const float length = float(result.hypotheses[h].size());
          const float sum = length > 0 ? result.scores[h] * length : result.scores[h];
          const float score = sum / (float(prefilled_text) + length);
          if (h == 0 || score > best_score) {
            best = h;
            best_score = score;
          }
        }
        Generated g;
        // the text tokens decode did not return: those of the prompt pass and the start
        // token; then decode's hypothesis (the rest of the forced prefix, the new tokens)
        g.ids.assign(prompts[i].begin() + sot_index + 4, prompts[i].begin() + prompt_tokens + 1);
        if (!result.hypotheses.empty()) {
          const auto& hyp = result.hypotheses[best];
          g.ids.insert(g.ids.end(), hyp.begin(), hyp.end());
        }
        g.score = result.hypotheses.empty() ? 0.f : best_score;
        g.no_speech_prob = probs32.at<float>({dim_t(i), dim_t(_no_speech_column)});
        out.push_back(std::move(g));
      }
      return out;
    }

  private:
    const size_t _threads;
    const std::shared_ptr<const models::WhisperModel> _model;
    const std::unique_ptr<RowsWhisperDecoder> _decoder;
    size_t _sot_id = 0, _eot_id = 0, _no_speech_id = 0, _no_speech_column = 0;
    size_t _output_size = 0, _output_bytes = 0;
    std::vector<size_t> _suppress;
  };

  // A Transformer decoder (Marian / OPUS-MT, NLLB, M2M-100) whose forced target prefix is
  // read in one pass: `TransformerDecoder::decode` over all prefix positions at step 0
  // fills the self-attention caches as the stepwise reading would (what
  // `WhisperDecoder::forward_prompt` does for Whisper).
  class PromptDecoder : public layers::TransformerDecoder {
  public:
    using layers::TransformerDecoder::TransformerDecoder;

    // The start token alone at step 0, then the rest of the prompt from step 1: a model
    // that starts from a zero embedding (Marian) skips the embedding scale at step 0, so a
    // prompt read whole at step 0 would miss the scale at every position.
    // `rows` rows read the same prompt (the state's memory has that many rows).
    void read_prompt(const std::vector<size_t>& prompt, layers::DecoderState& state,
                     size_t rows = 1) {
      const Device device = Device::CPU;
      const StorageView start({dim_t(rows)}, std::vector<int32_t>(rows, int32_t(prompt.front())),
                              device);
      decode(start, nullptr, 0, state, nullptr, nullptr, false);
      if (prompt.size() > 1) {
        const std::vector<std::vector<size_t>> rest(
          rows, std::vector<size_t>(prompt.begin() + 1, prompt.end()));
        decode(layers::make_sequence_inputs(rest, device), nullptr, 1, state, nullptr,
               nullptr, false);
      }
    }
  };

  // Greedy translation for a sequence-to-sequence model, after a forced target prefix or
  // none: the encoder once, the start token and the prefix but its last token read in one
  // decoder pass, then CTranslate2's own `decode` from the last prefix token (or from the
  // start token), as `Translator.translate_batch(beam_size=1, target_prefix=...)` goes on.
  // One thread's object (layers are not shared between threads); the weights are shared
  // per folder.
  class PrefixTranslator {
  public:
    PrefixTranslator(const std::string& path, size_t threads, const std::string& compute_type)
      : _threads(threads)
      , _model(load_any_model(path, str_to_compute_type(compute_type)))
      , _encoder(std::make_unique<layers::TransformerEncoder>(*_model, "encoder"))
      , _decoder(std::make_unique<PromptDecoder>(*_model, "decoder")) {
      const auto scoped_device_setter = _model->get_scoped_device_setter();
      _decoder->update_output_layer(_model->preferred_size_multiple());
    }

    // source: the source ids as the model reads them (language token, end token included).
    // prefix: the forced target ids after the start token (may be empty). Returns the new
    // ids after the prefix, without the end token: at most `max_new` of them.
    std::vector<size_t> continue_prefix(const std::vector<size_t>& source, size_t start_id,
                                        const std::vector<size_t>& prefix,
                                        const std::vector<size_t>& end_ids, size_t max_new,
                                        const std::vector<size_t>& disable_ids) {
      return continue_rows({source}, start_id, prefix, end_ids, {max_new}, {-1},
                           disable_ids)[0];
    }

    // Several sources continuing the same forced prefix in one batch: one encoder call,
    // one prompt pass and one greedy search with a row per source, each row's own cap
    // (`max_new`). A row whose `follows` is another row's index (-1: none) stops one token
    // past that row's continuation, as a look-ahead run after it would (the extra token
    // shows whether its last word ended there); greedy search takes a step's rows in row
    // order, so the followed row (a lower index) has ended by then.
    std::vector<std::vector<size_t>> continue_rows(
      const std::vector<std::vector<size_t>>& sources, size_t start_id,
      const std::vector<size_t>& prefix, const std::vector<size_t>& end_ids,
      const std::vector<size_t>& max_new, const std::vector<long>& follows,
      const std::vector<size_t>& disable_ids) {
      const size_t rows = sources.size();
      if (rows == 0 || max_new.size() != rows || follows.size() != rows)
        throw std::invalid_argument("one max_new and one follows per source");
      for (size_t i = 0; i < rows; ++i) {
        if (sources[i].empty())
          throw std::invalid_argument("empty source");
        if (follows[i] >= long(i))
          throw std::invalid_argument("a row can only follow an earlier row");
      }
      const size_t longest = *std::max_element(max_new.begin(), max_new.end());
      if (longest == 0)
        return std::vector<std::vector<size_t>>(rows);
      py::gil_scoped_release no_gil;
      set_num_threads(_threads);
      const auto scoped_device_setter = _model->get_scoped_device_setter();
      const Device device = Device::CPU;
      const dim_t multiple = _model->preferred_size_multiple();

      StorageView lengths(DataType::INT32, device);
      const StorageView ids = layers::make_sequence_inputs(sources, device, multiple, &lengths);
      StorageView memory(_encoder->output_type(), device);
      (*_encoder)({ids}, &lengths, memory);

      layers::DecoderState state = _decoder->initial_state();
      state.emplace("memory", std::move(memory));
      state.emplace("memory_lengths", std::move(lengths));

      // no prefix: the search starts from the start token at step 0, as translate_batch's
      dim_t start_step = 0;
      size_t first = start_id;
      if (!prefix.empty()) {
        std::vector<size_t> head{start_id};
        head.insert(head.end(), prefix.begin(), prefix.end() - 1);
        _decoder->read_prompt(head, state, rows);
        start_step = dim_t(head.size());
        first = prefix.back();
      }

      // each row's tokens so far (the end token not counted) and whether it has ended
      std::vector<size_t> generated(rows, 0);
      std::vector<bool> ended(rows, false);
      DecodingOptions options;
      options.start_step = start_step;
      options.beam_size = 1;
      options.max_length = longest;
      options.include_eos_in_hypotheses = false;
      options.disable_ids = disable_ids;
      options.callback = [&](DecodingStepResult step) {
        const size_t row = step.batch_id;
        const bool is_end = std::find(end_ids.begin(), end_ids.end(), step.token_id)
                            != end_ids.end();
        if (!is_end)
          generated[row] += 1;
        bool stop = step.is_last || generated[row] >= max_new[row];
        const long followed = follows[row];
        if (followed >= 0 && ended[followed] && generated[row] >= generated[followed] + 1)
          stop = true;
        if (stop)
          ended[row] = true;
        return stop;
      };
      std::vector<DecodingResult> results =
        decode(*_decoder, state, std::vector<std::vector<size_t>>(rows, {first}), end_ids,
               options);
      std::vector<std::vector<size_t>> out(rows);
      for (size_t i = 0; i < rows && i < results.size(); ++i) {
        if (!results[i].hypotheses.empty()) {
          out[i] = std::move(results[i].hypotheses[0]);
          if (out[i].size() > max_new[i])
            out[i].resize(max_new[i]);
        }
      }
      return out;
    }

  private:
    const size_t _threads;
    const std::shared_ptr<const models::Model> _model;
    const std::unique_ptr<layers::TransformerEncoder> _encoder;
    const std::unique_ptr<PromptDecoder> _decoder;
  };

  // The largest difference between CTranslate2's `Dense` and `RowsDense` over `input`
  // (rows x depth) for one linear layer of a Whisper folder, and both outputs (tests).
  std::tuple<float, py::array_t<float>, py::array_t<float>> compare_dense(
      const std::string& path, const std::string& scope,
      py::array_t<float, py::array::c_style | py::array::forcecast> input, bool gelu) {
    const auto model = load_model(path);
    const auto scoped_device_setter = model->get_scoped_device_setter();
    const ops::ActivationType activation = ops::ActivationType::GELU;
    const ops::ActivationType* act = gelu ? &activation : nullptr;
    const layers::Dense reference(*model, scope, act);
    const std::unique_ptr<RowsDense> rows = rows_dense(*model, scope, act);
    if (input.ndim() != 2)
      throw std::invalid_argument("input must be (rows, depth)");
    const StorageView x({input.shape(0), input.shape(1)}, std::vector<float>(
      input.data(), input.data() + input.size()), Device::CPU);
    StorageView a(DataType::FLOAT32, Device::CPU), b(DataType::FLOAT32, Device::CPU);
    reference(x, a);
    (*rows)(x, b);
    py::array_t<float> pa({a.dim(0), a.dim(1)}), pb({b.dim(0), b.dim(1)});
    std::memcpy(pa.mutable_data(), a.data<float>(), a.size() * sizeof(float));
    std::memcpy(pb.mutable_data(), b.data<float>(), b.size() * sizeof(float));
    float worst = 0;
    for (dim_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, std::abs(a.data<float>()[i] - b.data<float>()[i]));
    return {worst, pa, pb};
  }

  // The in-place product, AVX2 against plain C++, on given int8 data (tests): the largest
  // difference (0 when the kernel is exact).
  int64_t compare_kernels(py::array_t<int8_t, py::array::c_style | py::array::forcecast> x,
                          py::array_t<int8_t, py::array::c_style | py::array::forcecast> w,
                          bool shifted) {
    if (x.ndim() != 2 || w.ndim() != 2 || x.shape(1) != w.shape(1) || x.shape(1) % 32)
      throw std::invalid_argument("x (rows, depth), w (cols, depth), depth a multiple of 32");
    const dim_t rows = x.shape(0), depth = x.shape(1), cols = w.shape(0);
    std::vector<int32_t> a(rows * cols), b(rows * cols);
    rows_gemm_scalar(x.data(), shifted, rows, depth, w.data(), cols, a.data());
    if (!cpu_has_avx2())
      throw std::runtime_error("no AVX2 on this CPU");
    rows_gemm_avx2(x.data(), shifted, rows, depth, w.data(), cols, b.data());
    int64_t worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
      worst = std::max<int64_t>(worst, std::abs(int64_t(a[i]) - int64_t(b[i])));
    return worst;
  }

}  // namespace

PYBIND11_MODULE(_ct2_prefill, m) {
  m.attr("CTRANSLATE2_VERSION") = SPEECHPIPE_CT2_VERSION;
  m.def("compare_kernels", &compare_kernels, py::arg("x"), py::arg("w"), py::arg("shifted"));
  m.def("compare_dense", &compare_dense, py::arg("path"), py::arg("scope"), py::arg("input"),
        py::arg("gelu") = false);
  py::class_<Generated>(m, "Generated")
    .def_readonly("ids", &Generated::ids)
    .def_readonly("score", &Generated::score)
    .def_readonly("no_speech_prob", &Generated::no_speech_prob);
  py::class_<PrefillDecoder>(m, "PrefillDecoder")
    .def(py::init<const std::string&, size_t, const std::vector<size_t>&, size_t>(),
         py::arg("path"), py::arg("threads"), py::arg("restrict_ids") = std::vector<size_t>(),
         py::arg("rows_step") = 0)
    .def_property_readonly("output_size", &PrefillDecoder::output_size)
    .def_property_readonly("rows_step", &PrefillDecoder::rows_step)
    .def_property_readonly("rows_step_refused", &PrefillDecoder::rows_step_refused)
    .def_property_readonly("rows_steps_taken", &PrefillDecoder::rows_steps_taken)
    .def_property_readonly("output_bytes", &PrefillDecoder::output_bytes)
    .def("generate", &PrefillDecoder::generate, py::arg("memory"), py::arg("prompts"),
         py::arg("prompt_tokens"), py::arg("sot_index"), py::arg("beam_size"),
         py::arg("max_steps"), py::arg("suppress") = std::vector<size_t>());
  py::class_<PrefixTranslator>(m, "PrefixTranslator")
    .def(py::init<const std::string&, size_t, const std::string&>(), py::arg("path"),
         py::arg("threads"), py::arg("compute_type") = "default")
    .def("continue_prefix", &PrefixTranslator::continue_prefix, py::arg("source"),
         py::arg("start_id"), py::arg("prefix"), py::arg("end_ids"), py::arg("max_new"),
         py::arg("disable_ids") = std::vector<size_t>())
    .def("continue_rows", &PrefixTranslator::continue_rows, py::arg("sources"),
         py::arg("start_id"), py::arg("prefix"), py::arg("end_ids"), py::arg("max_new"),
         py::arg("follows"), py::arg("disable_ids") = std::vector<size_t>());
}
