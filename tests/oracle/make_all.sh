#!/usr/bin/env bash
# Regenerate every committed golden fixture under tests/data/models/.
# Deterministic: fixed seeds, fixed shapes. Needs the oracle venv
# (see tests/oracle/README.md); CI never runs this, it only reads the outputs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv-oracle/bin/python}"
OUT="${OUT_ROOT:-$ROOT/tests/data/models}"
MK=("$PY" "$HERE/make_fixture.py" --out-root "$OUT")

# 1. Llama, GQA (8 q heads / 2 kv heads), untied.
"${MK[@]}" --name llama_gqa --arch llama --seed 101 \
  --hidden 64 --heads 8 --kv-heads 2 --intermediate 128 --vocab 320 --layers 2 \
  --description "Llama, GQA 8/2, untied lm_head, default rope"

# 2. Qwen2: q/k/v biases, tied embeddings.
"${MK[@]}" --name qwen2_bias_tied --arch qwen2 --seed 202 \
  --hidden 64 --heads 4 --kv-heads 2 --intermediate 96 --vocab 384 --layers 2 \
  --rope-theta 1000000 --tie \
  --description "Qwen2, qkv biases, tie_word_embeddings=true (no lm_head.weight in the checkpoint), rope_theta 1e6"

# 3. Qwen3: q/k RMSNorm, head_dim != hidden/heads.
"${MK[@]}" --name qwen3_qknorm --arch qwen3 --seed 303 \
  --hidden 48 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 96 --vocab 352 --layers 2 \
  --rope-theta 1000000 \
  --description "Qwen3, q_norm/k_norm, head_dim 16 with hidden 48 and 4 heads (q_proj 48->64, o_proj 64->48)"

# 4a. Llama 3.1-style rope scaling; all three frequency bands occur (checked by
#     make_fixture.py). config.json written with the legacy keys
#     rope_theta + rope_scaling, as published Llama 3.x checkpoints have them.
"${MK[@]}" --name llama3_rope --arch llama --seed 404 \
  --hidden 64 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 128 --vocab 300 --layers 2 \
  --rope-theta 500000 \
  --rope-scaling '{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64}' \
  --legacy-rope-config \
  --description "Llama, rope_scaling llama3 (factor 8, low 1, high 4, original_max 64), rope_theta 5e5, head_dim 32 (q_proj 64->128); kept/interpolated/scaled bands all present; legacy rope_theta/rope_scaling config keys"

# 4b. Linear rope scaling, factor 2 (config in transformers-5 rope_parameters form).
"${MK[@]}" --name llama_linear_rope --arch llama --seed 405 \
  --hidden 64 --heads 4 --kv-heads 4 --intermediate 128 --vocab 288 --layers 2 \
  --rope-scaling '{"rope_type":"linear","factor":2.0}' \
  --description "Llama, MHA, rope_scaling linear factor 2 (rope_parameters form)"

# 5. bf16 checkpoint, sharded (index + >= 2 shards).
"${MK[@]}" --name llama_bf16_sharded --arch llama --seed 505 \
  --hidden 64 --heads 8 --kv-heads 4 --intermediate 128 --vocab 320 --layers 2 \
  --save-dtype bfloat16 --max-shard-size 60KB --min-shards 2 \
  --description "Llama saved in bfloat16, sharded with model.safetensors.index.json; golden outputs are fp32 math on the exactly upcast bf16 weights"

# 6a. Odd (prime) vocab; 12 q heads, 1 kv head (MQA) so T = 1,2,3,4 all work.
"${MK[@]}" --name odd_vocab --arch llama --seed 606 \
  --hidden 48 --heads 12 --kv-heads 1 --head-dim 8 --intermediate 96 --vocab 509 --layers 2 \
  --description "Llama, vocab 509 (prime: padding needed for T=2,3,4), 12 heads / 1 kv head, head_dim 8 != 48/12"

# 6b. Odd vocab, MHA with 12 kv heads (kv heads split, not replicated, at T=3,4).
"${MK[@]}" --name odd_vocab_mha --arch qwen2 --seed 607 \
  --hidden 48 --heads 12 --kv-heads 12 --intermediate 72 --vocab 331 --layers 1 --tie \
  --description "Qwen2, vocab 331 (prime), 12 heads = 12 kv heads, head_dim 4, tied, 1 layer"

# 7. Mistral with a small sliding window and prompts longer than it.
"${MK[@]}" --name mistral_swa --arch mistral --seed 707 \
  --hidden 64 --heads 8 --kv-heads 2 --intermediate 128 --vocab 320 --layers 2 \
  --sliding-window 8 --prompt-lens 5,8,12,21 \
  --description "Mistral, sliding_window 8 (each query sees itself and the 7 previous tokens); prompts of 12 and 21 tokens exceed it, and greedy decoding crosses it"

# 8. Llama with mlp_bias (gate/up/down biases, random) and the GELU (erf) activation.
"${MK[@]}" --name llama_mlp_bias_gelu --arch llama --seed 808 \
  --hidden 64 --heads 4 --kv-heads 2 --intermediate 96 --vocab 256 --layers 2 \
  --mlp-bias --hidden-act gelu \
  --description "Llama, mlp_bias=true (gate/up/down biases; down_proj's added once at tp > 1), hidden_act gelu (erf form)"

# 9. Qwen2 with the tanh GELU (gelu_pytorch_tanh), Mistral with relu.
"${MK[@]}" --name qwen2_gelu_tanh --arch qwen2 --seed 809 \
  --hidden 48 --heads 4 --kv-heads 2 --intermediate 72 --vocab 240 --layers 2 \
  --hidden-act gelu_pytorch_tanh \
  --description "Qwen2, hidden_act gelu_pytorch_tanh (tanh approximation)"
"${MK[@]}" --name mistral_relu --arch mistral --seed 810 \
  --hidden 48 --heads 4 --kv-heads 4 --intermediate 64 --vocab 224 --layers 1 \
  --hidden-act relu \
  --description "Mistral, hidden_act relu, no sliding window"

# 10. YaRN: rope_parameters form (Llama), the legacy rope_scaling form with beta_fast/slow
#     (Qwen2.5 long-context style), and the mscale pair with truncate false (Qwen3).
"${MK[@]}" --name llama_yarn --arch llama --seed 811 \
  --hidden 64 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 128 --vocab 256 --layers 2 \
  --rope-scaling '{"rope_type":"yarn","factor":8.0,"original_max_position_embeddings":64}' \
  --description "Llama, rope yarn factor 8 over an original 64 positions (beta 32/1, attention factor 0.1 ln 8 + 1), rope_parameters form"
"${MK[@]}" --name qwen2_yarn_legacy --arch qwen2 --seed 812 \
  --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96 --vocab 240 --layers 2 \
  --rope-theta 1000000 --legacy-rope-config \
  --rope-scaling '{"type":"yarn","factor":4.0,"original_max_position_embeddings":128,"beta_fast":16,"beta_slow":2}' \
  --description "Qwen2, rope_scaling yarn in the legacy type form (Qwen2.5 long-context style), factor 4, original 128, beta_fast 16, beta_slow 2"
"${MK[@]}" --name qwen3_yarn_mscale --arch qwen3 --seed 813 \
  --hidden 48 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 96 --vocab 224 --layers 2 \
  --rope-theta 1000000 \
  --rope-scaling '{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32,"mscale":0.707,"mscale_all_dim":1.0,"truncate":false}' \
  --description "Qwen3, rope yarn with mscale/mscale_all_dim (DeepSeek-style attention factor) and truncate false"

# 11. Dynamic NTK within max_position_embeddings (the prompts and generations reach
#     position 27 of 32), where transformers keeps the default frequencies.
"${MK[@]}" --name llama_dynamic_rope --arch llama --seed 814 \
  --hidden 64 --heads 4 --kv-heads 2 --intermediate 96 --vocab 224 --layers 1 \
  --max-position 32 --prompt-lens 3,9,20 --legacy-rope-config \
  --rope-scaling '{"rope_type":"dynamic","factor":4.0}' \
  --description "Llama, rope_scaling dynamic factor 4, max_position_embeddings 32: generations reach position 27, inside the context, where transformers keeps the default frequencies"

# 12. longrope: the 17-token prompt takes the long factors, the 13-token prompt's
#     generation crosses into them (greedy as generate() computes it, with its cache).
"${MK[@]}" --name llama_longrope --arch llama --seed 815 \
  --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 96 --vocab 224 --layers 2 \
  --max-position 64 --prompt-lens 3,8,13,17 \
  --rope-scaling '{"rope_type":"longrope","original_max_position_embeddings":16,"long_factor":[1.0,1.5,2.0,3.0,4.0,6.0,8.0,12.0],"short_factor":[1.0,1.0,1.1,1.2,1.3,1.5,1.8,2.0]}' \
  --description "Llama, rope longrope over an original 16 positions (factor 64/16 = 4, attention factor sqrt(1 + ln 4 / ln 16)): the 17-token prompt rotates with the long factors, the 13-token prompt's generation crosses into them (greedy from generate() with its cache)"

echo "all fixtures written to $OUT"
du -sh "$OUT"
