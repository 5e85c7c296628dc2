//! Leader election with two real processes: one writes, the other waits;
//! SIGTERM hands over at once, SIGKILL within lease duration + 5 s.

use std::time::{Duration, Instant};

use crate::harness::{CONVERGE, Env, Operator, wait_for};
use crate::observe::*;

fn elected(env: &Env, lease: &str) -> (Operator, Operator) {
    let start = || {
        env.operator()
            .arg("--leader-elect")
            .arg("--lease-namespace")
            .arg(env.namespace.clone())
            .arg("--lease-duration")
            .arg(lease)
            .start()
    };
    (start(), start())
}

async fn leader_of<'a>(ops: &'a [&'a Operator]) -> usize {
    wait_for("exactly one leader", CONVERGE, || async {
        let leaders: Vec<usize> = ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.metric("modelservice_leader") == Some(1.0))
            .map(|(i, _)| i)
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_sigterm_hands_over_at_once() {
    let env = Env::new().await;
    let (a, b) = elected(&env, "15s");
    a.ready().await;
    b.ready().await;
    let first = leader_of(&[&a, &b]).await;
    let (mut leader, standby) = if first == 0 { (a, b) } else { (b, a) };
    env.apply_ms("led", cpu_spec()).await;
    wait_ms(&env, "led", "status from the leader", CONVERGE, |_| true).await;
    assert!(
        standby
            .metric("modelservice_reconcile_total{result=\"success\"}")
            .is_none(),
        "the standby reconciled"
    );

    let t = Instant::now();
    leader.signal("TERM");
    assert_eq!(leader.exited(Duration::from_secs(20)).await.code(), Some(0));
    standby
        .await_metric("modelservice_leader", 1.0, CONVERGE)
        .await;
    let took = t.elapsed();
    eprintln!("leader handover took {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "handover took {took:?}: the lease was not released on SIGTERM; the standby's log:\n{}",
        standby.logs()
    );

    // The new leader acts on changes.
    let mut spec = cpu_spec();
    spec["args"] = serde_json::json!(["--after-handover"]);
    env.apply_ms("led", spec).await;
    wait_for("the new leader to apply", CONVERGE, || async {
        let d = deployment(&env, "led").await?;
        d.spec.template.spec.as_ref()?.containers[0]
            .args
            .as_ref()?
            .iter()
            .any(|a| a == "--after-handover")
            .then_some(())
    })
    .await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_the_lease_duration_plus_five_seconds() {
    let env = Env::new().await;
    let lease = Duration::from_secs(6);
    let (a, b) = elected(&env, "6s");
    a.ready().await;
    b.ready().await;
    let first = leader_of(&[&a, &b]).await;
    let (leader, standby) = if first == 0 { (a, b) } else { (b, a) };
    let t = Instant::now();
    leader.signal("KILL");
    drop(leader);
    standby
        .await_metric("modelservice_leader", 1.0, lease + Duration::from_secs(30))
        .await;
    let took = t.elapsed();
    eprintln!("leader handover took {took:?}");
    assert!(
        took <= lease + Duration::from_secs(5),
        "failover took {took:?}"
    );
    env.finish().await;
}
