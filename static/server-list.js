import { connect } from "./ws.js";
import { updateConnectionBadges } from "./connection-status.js";

connect({ onEvent: updateConnectionBadges });
