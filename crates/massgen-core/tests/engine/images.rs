//! Images in the engine, against scripted providers in paused time: agents that can see
//! images get them with every turn and the presentation, the others a note, and the
//! session says which agents saw them.

use massgen_core::coordination::*;
use massgen_core::provider::{Image, ImageSource, Message, ProviderRequest, Role};
use massgen_core::testing::*;

fn image(url: &str) -> Image {
    Image {
        source: ImageSource::Url { url: url.into() },
        detail: None,
    }
}

fn user_message(req: &ProviderRequest) -> &Message {
    req.messages
        .iter()
        .find(|m| m.role == Role::User)
        .expect("a user message")
}

#[tokio::test(start_paused = true)]
async fn seeing_agents_get_the_images_and_the_others_a_note() {
    let seeing = member("seeing", "A", 0, "agent1");
    let blind = member("blind", "B", 1, "agent1");
    let mut spec = spec(
        &[("seeing", &seeing), ("blind", &blind)],
        OrchestratorOptions::default(),
    );
    spec.agents[0].vision = true;
    let mut earlier = Message::user("Look at this.");
    earlier.images = vec![image("https://example.com/1.png")];
    spec.input.history = vec![earlier, Message::assistant("A dot.")];
    spec.input.question_images = vec![image("https://example.com/2.png")];
    let run = run(spec).await;
    assert_eq!(run.summary().winner.label, "agent1");

    match run.kinds()[1] {
        EventKind::ImagesShown {
            images,
            seen_by,
            not_seen_by,
        } => {
            assert_eq!(*images, 2);
            assert_eq!(seen_by.len(), 1);
            assert_eq!(seen_by[0].agent_id, "seeing");
            assert_eq!(not_seen_by[0].agent_id, "blind");
        }
        other => panic!("expected images_shown after session_started, got {other:?}"),
    }

    let turns = seeing.requests();
    assert!(turns.iter().any(is_presentation), "the winner presents");
    for req in &turns {
        let user = user_message(req);
        assert_eq!(
            user.images,
            vec![
                image("https://example.com/1.png"),
                image("https://example.com/2.png")
            ],
            "every turn and the presentation carry the images in order"
        );
        assert!(user.content.contains("user: Look at this. [image 1]"));
        assert!(
            user.content
                .contains("<original_message>\nWhat is 2+2? [image 2]\n</original_message>")
        );
        assert!(user.content.contains("attached below"));
        assert!(!user.content.contains("cannot see images"));
    }
    let turns = blind.requests();
    assert!(!turns.is_empty());
    for req in &turns {
        assert!(req.messages.iter().all(|m| m.images.is_empty()));
        let user = user_message(req);
        assert!(user.content.contains("[image 2]"));
        assert!(user.content.contains("Your model cannot see images"));
    }
}

#[tokio::test(start_paused = true)]
async fn without_images_nothing_is_said_about_them() {
    let a = member("a", "A", 0, "agent1");
    let mut spec = spec(&[("a", &a)], OrchestratorOptions::default());
    spec.agents[0].vision = true;
    let run = run(spec).await;
    run.summary();
    assert!(
        !run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::ImagesShown { .. }))
    );
    for req in a.requests() {
        let user = user_message(&req);
        assert!(user.images.is_empty());
        assert!(!user.content.contains("[image"));
    }
}
