//! `paddock image build`: the agent image, from the Dockerfile built into paddock.

use clap::Subcommand;

use super::exit;
use super::render::{Progress, print_json};
use crate::engine::Paddock;
use crate::error::{Error, Result};

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build the agent image (Dockerfile.agent, built into paddock) through the Docker API.
    Build {
        /// The image to build from; needs a shell (git is installed when missing).
        #[arg(long, default_value = "debian:bookworm-slim")]
        base_image: String,
        #[arg(long, default_value = crate::config::DEFAULT_IMAGE)]
        tag: String,
        /// Build it on this engine of the user config's `engines:` (default: the local one).
        #[arg(long, value_name = "NAME")]
        engine: Option<String>,
        /// Only a shell, git, CA certificates and ps: none of the default image's toolchains
        /// (Python, Node.js, build-essential, the everyday CLI tools).
        #[arg(long)]
        minimal: bool,
        /// Print only the image id.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(paddock: &Paddock, command: ImageCommand) -> Result<i32> {
    let ImageCommand::Build {
        base_image,
        tag,
        engine,
        minimal,
        json,
    } = command;
    let tools = if minimal {
        crate::runtime::capabilities::AgentTools::Minimal
    } else {
        crate::runtime::capabilities::AgentTools::Full
    };
    if let Some(name) = &engine {
        crate::engines::find(&paddock.config(None)?.engines, name)?;
    }
    // A spinner with the current step on a terminal; the build's lines when stderr is a
    // log; nothing under --json.
    let spinner = Progress::spinner(json);
    let mut progress = |line: &str| {
        if spinner.shown() {
            spinner.message(line);
        } else if !json {
            tell!("{line}");
        }
    };
    let runtime = paddock.runtimes().engine(engine.as_deref());
    let id = match runtime.capabilities().images {
        Some(images) => {
            images
                .build_image(&base_image, &tag, tools, &mut progress)
                .await
        }
        None => Err(crate::runtime::lacks(runtime.as_ref(), "build images")),
    };
    spinner.finish();
    let id = id.map_err(Error::Runtime)?;
    if json {
        print_json(&serde_json::json!({ "tag": tag, "id": id }));
    } else {
        let place = engine.map_or_else(String::new, |name| format!(" on engine {name}"));
        say!("built {tag} from {base_image}{place}");
    }
    Ok(exit::OK)
}
