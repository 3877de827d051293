//! `purge_namespace` on every topology: nothing of the namespace is left,
//! and the others are spared.

use super::*;

/// Writes [`FILLER`] keys of `namespace` on every master, so that a scan
/// of another namespace meets pages that match nothing.
async fn fill(d: &Deployment, namespace: &str) {
    let keys: Vec<String> = (0..FILLER)
        .map(|i| format!("distlock:{{{namespace}:filler/{i}}}"))
        .collect();
    let mut raws = Vec::new();
    if d.cluster {
        raws.push(d.raw().await);
    } else {
        for master in &d.masters {
            raws.push(Raw::Server(raw_connection(master).await));
        }
    }
    for raw in raws {
        let sets = keys.iter().map(|key| {
            let mut raw = raw.clone();
            async move { raw.set(key).await }
        });
        stream::iter(sets)
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<()>>()
            .await;
    }
}

/// Everything of a namespace, held or not, goes with a purge; its holders
/// find out at their next renewal; another namespace keeps its own. A
/// third namespace of many keys makes the purge's scan meet pages with
/// nothing of its namespace; it is purged last.
async fn purge_spares_others(d: Deployment, prefix: &str) {
    let (gone, kept) = (format!("{prefix}-gone"), format!("{prefix}-kept"));
    let filler = format!("{prefix}-filler");
    fill(&d, &filler).await;
    let purged = d.locker(&gone, "1500ms").await;
    let spared = d.locker(&kept, "1500ms").await;
    let mut held = Vec::new();
    for locker in [&purged, &spared] {
        for i in 0..50 {
            let name = format!("order/{i}");
            locker.lock(&name).await.unwrap().release().await.unwrap();
        }
        held.push(locker.lock("held").await.unwrap());
        if !d.redlock {
            held.push(locker.rwlock("read").unwrap().read().await.unwrap());
            held.push(locker.semaphore("sem", 3).unwrap().acquire().await.unwrap());
        }
    }
    let before = d.keys_of(&kept).await.concat();
    assert!(!d.keys_of(&gone).await.concat().is_empty());
    purged.purge_namespace().await.unwrap();
    assert_eq!(d.keys_of(&gone).await.concat(), [], "the purged namespace");
    let (lost, still): (Vec<_>, Vec<_>) = held
        .into_iter()
        .partition(|g| g.name().namespace().as_str() == gone);
    for guard in &lost {
        let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("a purged holder never learnt it lost");
        assert_eq!(reason, LossReason::RenewalRefused, "{}", guard.key());
    }
    let after: HashSet<String> = d
        .keys_of(&kept)
        .await
        .concat()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for (key, _) in &before {
        assert!(after.contains(key), "{key} of the other namespace went");
    }
    for guard in still {
        assert!(guard.is_held(), "{}", guard.key());
        guard.release().await.unwrap();
    }
    assert_eq!(
        d.keys_of(&gone).await.concat(),
        [],
        "renewals brought keys back"
    );
    // A cluster keeps each key once; independent servers each a copy.
    let copies = if d.cluster { 1 } else { d.masters.len() };
    assert_eq!(d.keys_of(&filler).await.concat().len(), FILLER * copies);
    d.locker(&filler, "1s")
        .await
        .purge_namespace()
        .await
        .unwrap();
    assert_eq!(d.keys_of(&filler).await.concat(), []);
}

on_each_deployment!(purge_spares_others {
    purging_one_server => single, "purge-single";
    purging_a_cluster => cluster, "purge-cluster";
    purging_a_sentinel_master => sentinel, "purge-sentinel";
    purging_redlock_masters => redlock, "purge-redlock";
});
