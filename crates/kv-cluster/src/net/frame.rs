//! The Raft RPCs on the wire. A frame is a 4-byte big-endian length (tokio-util's
//! `LengthDelimitedCodec`, which refuses a length past [`MAX_FRAME_BYTES`] before reading
//! any of it), then the frame: the wire version (one byte), the cluster id (16 bytes, little
//! endian), and a postcard-encoded message. A frame of another version or cluster, too short,
//! with bytes left after its message, or cut off by the end of the connection is a typed
//! [`ClusterError`]; the server answers it with [`Response::Refused`] and closes.

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use crate::error::{encode, ClusterError};
use crate::types::{KvRaft, NodeId, SnapshotMeta, Vote};

/// This build's frame format.
pub const WIRE_VERSION: u8 = 1;
/// The largest frame taken. A snapshot travels in one frame, so this bounds a keyspace a
/// follower can catch up by snapshot: about two million keys of 100-byte values.
pub const MAX_FRAME_BYTES: usize = 256 << 20;
/// The version byte and the cluster id.
pub const HEADER_BYTES: usize = 1 + 16;

/// A request, with whom it is from and for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// The sender's node id.
    pub from: NodeId,
    /// The node it is for (a pool started under the wrong id is found out).
    pub to: NodeId,
    /// The request.
    pub request: Request,
}

/// A Raft RPC.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// Entries to append (or a heartbeat).
    Append(openraft::raft::AppendEntriesRequest<KvRaft>),
    /// A vote request.
    Vote(openraft::raft::VoteRequest<KvRaft>),
    /// A pre-vote request (nothing changes on the receiver).
    PreVote(openraft::raft::VoteRequest<KvRaft>),
    /// A whole snapshot.
    Snapshot {
        /// The leader's vote.
        vote: Vote,
        /// What it covers.
        meta: SnapshotMeta,
        /// Its bytes (checked on receipt by the state machine).
        data: Vec<u8>,
    },
}

impl Request {
    /// The request's kind, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Append(_) => "append-entries",
            Request::Vote(_) => "vote",
            Request::PreVote(_) => "pre-vote",
            Request::Snapshot { .. } => "snapshot",
        }
    }
}

/// What a node answers.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// To [`Request::Append`].
    Append(openraft::raft::AppendEntriesResponse<KvRaft>),
    /// To [`Request::Vote`] and [`Request::PreVote`].
    Vote(openraft::raft::VoteResponse<KvRaft>),
    /// To [`Request::Snapshot`].
    Snapshot(openraft::raft::SnapshotResponse<KvRaft>),
    /// The node took the request but could not serve it (it is stopping): why.
    Failed(String),
    /// The request was refused and the connection is being closed: why.
    Refused(String),
}

impl Response {
    /// The reply's kind, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Response::Append(_) => "append-entries",
            Response::Vote(_) => "vote",
            Response::Snapshot(_) => "snapshot",
            Response::Failed(_) => "failed",
            Response::Refused(_) => "refused",
        }
    }
}

/// A frame of cluster `cluster` carrying `message`.
pub fn seal<T: Serialize>(cluster: u128, message: &T) -> Result<Bytes, ClusterError> {
    let body = encode(message, || "a Raft RPC".to_string())?;
    let mut frame = Vec::with_capacity(HEADER_BYTES + body.len());
    frame.push(WIRE_VERSION);
    frame.extend_from_slice(&cluster.to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(Bytes::from(frame))
}

/// The message of a frame, checked to be of this version and of cluster `cluster`.
pub fn open<T: DeserializeOwned>(cluster: u128, frame: &[u8]) -> Result<T, ClusterError> {
    if frame.len() < HEADER_BYTES {
        return Err(ClusterError::ShortFrame {
            len: frame.len(),
            header: HEADER_BYTES,
        });
    }
    if frame[0] != WIRE_VERSION {
        return Err(ClusterError::WireVersion {
            found: frame[0],
            expected: WIRE_VERSION,
        });
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&frame[1..HEADER_BYTES]);
    let theirs = u128::from_le_bytes(id);
    if theirs != cluster {
        return Err(ClusterError::ForeignCluster {
            ours: cluster,
            theirs,
        });
    }
    let (message, rest) = postcard::take_from_bytes(&frame[HEADER_BYTES..]).map_err(|source| {
        ClusterError::Codec {
            what: "a Raft RPC frame does not decode".into(),
            source,
        }
    })?;
    if !rest.is_empty() {
        return Err(ClusterError::TrailingBytes { extra: rest.len() });
    }
    Ok(message)
}

/// Frames out of and into a byte stream: the length prefix is `LengthDelimitedCodec`'s; this
/// wrapper types its errors and tells a connection that ended inside a frame from one that
/// ended between frames.
#[derive(Debug)]
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
    /// A frame has begun (its length or some of its bytes read) and not ended.
    inside: bool,
}

impl FrameCodec {
    /// Frames of up to `max` bytes.
    pub fn new(max: usize) -> FrameCodec {
        FrameCodec {
            inner: LengthDelimitedCodec::builder()
                .max_frame_length(max)
                .new_codec(),
            inside: false,
        }
    }

    fn max(&self) -> usize {
        self.inner.max_frame_length()
    }
}

impl Default for FrameCodec {
    fn default() -> FrameCodec {
        FrameCodec::new(MAX_FRAME_BYTES)
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = ClusterError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, ClusterError> {
        let before = src.len();
        match self.inner.decode(src) {
            Ok(Some(frame)) => {
                self.inside = false;
                Ok(Some(frame))
            }
            Ok(None) => {
                // The codec takes the length prefix off as soon as it has it.
                if src.len() < before || !src.is_empty() {
                    self.inside = true;
                }
                Ok(None)
            }
            Err(e)
                if e.get_ref().is_some_and(|inner| {
                    inner.is::<tokio_util::codec::LengthDelimitedCodecError>()
                }) =>
            {
                Err(ClusterError::FrameTooLarge { max: self.max() })
            }
            Err(e) => Err(e.into()),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, ClusterError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if self.inside || !src.is_empty() => {
                Err(ClusterError::TruncatedFrame { pending: src.len() })
            }
            None => Ok(None),
        }
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = ClusterError;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> Result<(), ClusterError> {
        if frame.len() > self.max() {
            return Err(ClusterError::FrameTooLarge { max: self.max() });
        }
        Ok(self.inner.encode(frame, dst)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: u128 = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321;

    fn vote_envelope() -> Envelope {
        let vote = Vote::new(3, 2);
        Envelope {
            from: 2,
            to: 1,
            request: Request::Vote(openraft::raft::VoteRequest::new(vote, None)),
        }
    }

    fn framed(payload: &[u8]) -> BytesMut {
        let mut wire = BytesMut::new();
        FrameCodec::default()
            .encode(Bytes::copy_from_slice(payload), &mut wire)
            .unwrap();
        wire
    }

    #[test]
    fn a_request_goes_through_the_codec_and_back() {
        let frame = seal(CLUSTER, &vote_envelope()).unwrap();
        let mut wire = framed(&frame);
        let mut codec = FrameCodec::default();
        let got = codec.decode(&mut wire).unwrap().expect("a whole frame");
        let envelope: Envelope = open(CLUSTER, &got).unwrap();
        assert_eq!((envelope.from, envelope.to), (2, 1));
        assert!(matches!(envelope.request, Request::Vote(v) if v.vote == Vote::new(3, 2)));
        assert!(
            codec.decode_eof(&mut wire).unwrap().is_none(),
            "a clean end"
        );
    }

    #[test]
    fn a_frame_of_another_cluster_is_refused_with_both_ids() {
        let frame = seal(CLUSTER ^ 1, &vote_envelope()).unwrap();
        let err = open::<Envelope>(CLUSTER, &frame).unwrap_err();
        assert!(
            matches!(err, ClusterError::ForeignCluster { ours, theirs } if ours == CLUSTER && theirs == CLUSTER ^ 1),
            "{err}"
        );
    }

    #[test]
    fn another_version_a_short_frame_garbage_and_trailing_bytes_are_refused() {
        let mut frame = seal(CLUSTER, &vote_envelope()).unwrap().to_vec();
        frame[0] = WIRE_VERSION + 1;
        assert!(matches!(
            open::<Envelope>(CLUSTER, &frame),
            Err(ClusterError::WireVersion { found, expected: WIRE_VERSION }) if found == WIRE_VERSION + 1
        ));
        assert!(matches!(
            open::<Envelope>(CLUSTER, &[WIRE_VERSION; 5]),
            Err(ClusterError::ShortFrame { len: 5, .. })
        ));
        let mut garbage = seal(CLUSTER, &()).unwrap().to_vec();
        garbage.extend_from_slice(&[0xff; 40]);
        assert!(matches!(
            open::<Envelope>(CLUSTER, &garbage),
            Err(ClusterError::Codec { .. })
        ));
        let mut trailing = seal(CLUSTER, &vote_envelope()).unwrap().to_vec();
        trailing.extend_from_slice(b"xyz");
        assert!(matches!(
            open::<Envelope>(CLUSTER, &trailing),
            Err(ClusterError::TrailingBytes { extra: 3 })
        ));
    }

    #[test]
    fn an_oversized_length_is_refused_before_its_bytes_are_read() {
        let mut codec = FrameCodec::new(1024);
        let mut wire = BytesMut::from(&2048u32.to_be_bytes()[..]);
        assert!(matches!(
            codec.decode(&mut wire),
            Err(ClusterError::FrameTooLarge { max: 1024 })
        ));
        assert!(matches!(
            FrameCodec::new(8).encode(Bytes::from_static(&[0; 9]), &mut BytesMut::new()),
            Err(ClusterError::FrameTooLarge { max: 8 })
        ));
    }

    #[test]
    fn a_connection_ending_inside_a_frame_is_a_truncated_frame() {
        let whole = framed(&seal(CLUSTER, &vote_envelope()).unwrap());
        for cut in [1, 4, 5, whole.len() - 1] {
            let mut codec = FrameCodec::default();
            let mut wire = BytesMut::from(&whole[..cut]);
            assert!(codec.decode(&mut wire).unwrap().is_none(), "cut at {cut}");
            assert!(
                matches!(
                    codec.decode_eof(&mut wire),
                    Err(ClusterError::TruncatedFrame { .. })
                ),
                "cut at {cut}"
            );
        }
    }
}
