//! A back-to-back trial: two detached turns on one conversation with a
//! kill between them. The first turn (with async calls) is started on a
//! random server, a random server is SIGKILLed at a random moment, and
//! right after the kill the second turn is sent to the surviving server,
//! again every [`BUSY_RETRY`] while it answers 409 `conversation_busy`;
//! the time from the kill to its acceptance is recorded. Then the killed
//! server is restarted as in every trial, both turns are judged as turns
//! (their conversation may grow after each settles), and the conversation
//! is judged for its order ([`crate::order`]).

use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};

use crate::config::ChaosConfig;
use crate::model::ModelCall;
use crate::order::{misorderings, BackToBack};
use crate::plan::TurnPlan;
use crate::trial::{
    kill, kill_moment, post_turn, restart_and_judge, write_evidence, BackToBackRecord, Cluster,
    TrialReport, TurnRecord,
};
use crate::ChaosError;

/// How soon a turn refused as busy is sent again.
const BUSY_RETRY: Duration = Duration::from_millis(50);

/// The error code of a turn refused because its conversation is held.
const BUSY: &str = "conversation_busy";

/// Runs back-to-back trial `index`.
pub async fn run(
    cluster: &mut Cluster,
    config: &ChaosConfig,
    rng: &mut impl Rng,
    index: usize,
) -> Result<TrialReport, ChaosError> {
    let first = TurnPlan::random(rng, index, 0, config.max_siblings);
    let second = TurnPlan::random(rng, index, 1, config.max_siblings);
    let home = rng.gen_range(0..2);
    let victim = rng.gen_range(0..2);
    let kill_after = kill_moment(rng, config);
    let conversation_id = format!("chaos-{}-t{index}", cluster.tag);

    let answer = post_turn(cluster, home, &first, &conversation_id).await;
    let mut first_turn =
        TurnRecord::started(index, home, first.clone(), conversation_id.clone(), answer);
    first_turn.shared = true;
    let started = Instant::now();
    tokio::time::sleep(kill_after).await;
    let killed = kill(cluster, victim, started).await?;
    let killed_as = (cluster.servers[victim].name.clone(), killed.after_start);
    let survivor = 1 - victim;
    let (answer, busy) = post_until_free(
        cluster,
        survivor,
        &second,
        &conversation_id,
        killed.at + config.settle_timeout,
    )
    .await;
    let accepted_after_kill = answer
        .as_ref()
        .is_ok_and(|answer| answer.is_success())
        .then(|| killed.at.elapsed());
    let mut second_turn = TurnRecord::started(
        index,
        survivor,
        second.clone(),
        conversation_id.clone(),
        answer,
    );
    second_turn.shared = true;

    let mut report =
        restart_and_judge(cluster, config, vec![first_turn, second_turn], killed).await?;
    let mut record = BackToBackRecord {
        trial: index,
        conversation_id,
        first,
        second,
        first_on: cluster.servers[home].name.clone(),
        killed: killed_as,
        accepted_after_kill,
        busy,
        misordered: Vec::new(),
    };
    record.misordered = check_order(cluster, &record).await;
    report.back_to_back = Some(record);
    Ok(report)
}

/// Sends `plan`'s turn until it is not refused as busy, or `deadline`
/// passes; returns the last answer and how many busy answers came first.
async fn post_until_free(
    cluster: &Cluster,
    server: usize,
    plan: &TurnPlan,
    conversation_id: &str,
    deadline: Instant,
) -> (Result<crate::api::Answer, reqwest::Error>, usize) {
    let mut busy = 0;
    loop {
        let answer = post_turn(cluster, server, plan, conversation_id).await;
        let refused = matches!(&answer, Ok(answer)
            if answer.status == 409 && answer.body["error"]["code"] == BUSY);
        if !refused || Instant::now() >= deadline {
            return (answer, busy);
        }
        busy += 1;
        tokio::time::sleep(BUSY_RETRY).await;
    }
}

/// Judges the order of `record`'s stored conversation against the model's
/// requests; writes evidence (`t<trial>-order.json`) when it is wrong. An
/// unreadable conversation is not judged here (its turns count it lost).
pub async fn check_order(cluster: &Cluster, record: &BackToBackRecord) -> Vec<String> {
    let path = format!("/conversations/{}", record.conversation_id);
    let Some(answer) = cluster.get(0, &path).await.filter(|a| a.status == 200) else {
        return Vec::new();
    };
    let messages = answer.body["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let first_calls = cluster.model.calls_of(&record.first.marker);
    let second_calls = cluster.model.calls_of(&record.second.marker);
    let reasons = misorderings(&BackToBack {
        first: &record.first,
        second: &record.second,
        messages,
        first_calls: &first_calls,
        second_calls: &second_calls,
    });
    if !reasons.is_empty() {
        let requests = |calls: &[ModelCall]| -> Vec<Value> {
            calls
                .iter()
                .map(|call| {
                    json!({"seq": call.seq, "phase": format!("{:?}", call.phase),
                           "key": call.key, "lastUser": call.last_user,
                           "lastUserAnswered": call.last_user_answered, "messages": call.shape})
                })
                .collect()
        };
        write_evidence(
            cluster,
            &format!("{}-order", record.name()),
            &json!({
                "conversationId": record.conversation_id,
                "first": record.first.user_text(),
                "second": record.second.user_text(),
                "firstOn": record.first_on,
                "killed": record.killed.0,
                "killedAfterMs": record.killed.1.as_millis(),
                "acceptedAfterKillMs": record.accepted_after_kill.map(|d| d.as_millis()),
                "misordered": reasons,
                "conversation": answer.body,
                "firstModelRequests": requests(&first_calls),
                "secondModelRequests": requests(&second_calls),
            }),
        );
    }
    reasons
}
