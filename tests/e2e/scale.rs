//! Many objects at once: 100 ModelServices all converge.

use std::time::Duration;

use futures::future::join_all;
use modelservice_operator::api::ModelService;

use crate::harness::{Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_modelservices_converge() {
    let env = Env::new().await;
    let _op = env.operator().start();
    let names: Vec<String> = (0..100).map(|i| format!("m{i:03}")).collect();
    join_all(names.iter().map(|n| env.apply_ms(n, cpu_spec()))).await;

    let serving = pods_can_serve("a_hundred_modelservices_converge");
    let done = wait_for(
        "all 100 ModelServices to converge",
        Duration::from_secs(180),
        || async {
            let list = env
                .api::<ModelService>()
                .list(&Default::default())
                .await
                .ok()?;
            let ok = list
                .items
                .iter()
                .filter(|ms| {
                    observed_current(ms)
                        && (!serving || condition(ms, "Ready").is_some_and(|(s, _)| s == "True"))
                })
                .count();
            (ok == 100).then_some(ok)
        },
    )
    .await;
    assert_eq!(done, 100);
    env.finish().await;
}
