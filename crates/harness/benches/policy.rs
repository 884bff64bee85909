//! Judging one tool call by an account layer of 100 policies (a permit
//! with an argument condition and a forbid per tool, over 50 tools) under
//! an agent layer of 2: the cost policies add to every call, and whether
//! a tool is offered at all (partial evaluation, once per tool and turn).
//! Beside it, the worst case: 100 policies scoped to any action (each
//! naming its tool in a condition instead), which a layer's index by tool
//! cannot narrow, so Cedar evaluates them all. The goal: at most 50 µs per
//! call (median). Run by `make bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use toolserver_domain::{CallPath, ToolEffects};
use toolserver_harness::policy::{CallGate, Layer, LayerName, PolicyStack};

/// Tools named by the account layer; each gets two policies.
const TOOLS: usize = 50;

fn account_layer() -> Layer {
    let mut text = String::new();
    for n in 0..TOOLS {
        text.push_str(&format!(
            "@id(\"allow-{n}\") permit(principal, action == Action::\"tool_{n}\", resource) \
             when {{ context.input.amount < 500 && context.turn has agent }};\n\
             @id(\"cap-{n}\") forbid(principal == User::\"mallory\", action == Action::\"tool_{n}\", resource) \
             when {{ context.input.amount > 10000 }};\n"
        ));
    }
    let layer = Layer::parse(&text).unwrap();
    assert_eq!(layer.len(), 2 * TOOLS);
    layer
}

/// The same rules written against any action: nothing for the index.
fn generic_layer() -> Layer {
    let mut text = String::new();
    for n in 0..TOOLS {
        text.push_str(&format!(
            "@id(\"allow-{n}\") permit(principal, action, resource) \
             when {{ resource.name == \"tool_{n}\" && context.input.amount < 500 && context.turn has agent }};\n\
             @id(\"cap-{n}\") forbid(principal == User::\"mallory\", action, resource) \
             when {{ resource.name == \"tool_{n}\" && context.input.amount > 10000 }};\n"
        ));
    }
    let layer = Layer::parse(&text).unwrap();
    assert_eq!(layer.len(), 2 * TOOLS);
    layer
}

fn gate_of(account: Layer) -> CallGate {
    let agent = Layer::parse(
        r#"@decision("allow") permit(principal, action, resource);
           forbid(principal, action == Action::"wipe", resource);"#,
    )
    .unwrap();
    let stack = PolicyStack::default()
        .with(LayerName::Account, Arc::new(account))
        .with(LayerName::Agent, Arc::new(agent));
    CallGate::new(stack, Some("ann".into()), CallPath::Turn)
        .in_turn("agent_1".into(), Some("conv".into()))
}

fn judge(c: &mut Criterion) {
    let gate = gate_of(account_layer());
    let input = json!({"amount": 499, "note": "refund for order 1234", "items": ["a", "b"]});
    let verdict = gate.decide("tool_25", ToolEffects::SideEffect, &input);
    assert_eq!(verdict.policies, ["account:allow-25", "agent:policy0"]);
    c.bench_function("decide one call (100 + 2 policies)", |b| {
        b.iter(|| gate.decide("tool_25", ToolEffects::SideEffect, &input))
    });
    c.bench_function("offer one tool (100 + 2 policies)", |b| {
        b.iter(|| gate.offers("tool_25", ToolEffects::SideEffect))
    });
    let generic = gate_of(generic_layer());
    let verdict = generic.decide("tool_25", ToolEffects::Read, &input);
    assert_eq!(verdict.policies, ["account:allow-25", "agent:policy0"]);
    c.bench_function("decide one call (100 + 2 policies on any action)", |b| {
        b.iter(|| generic.decide("tool_25", ToolEffects::Read, &input))
    });
}

criterion_group!(benches, judge);
criterion_main!(benches);
