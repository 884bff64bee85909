//! Public identifiers: a UUIDv7 (time-ordered, so listing by id follows
//! creation order) shown as a type prefix and 32 hex characters.

/// Defines an id type `$name` shown as `$prefix` + 32 hex characters.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(uuid::Uuid);

        impl $name {
            /// A new, time-ordered id (UUIDv7).
            pub fn generate() -> Self {
                Self(uuid::Uuid::now_v7())
            }

            /// Wraps a stored UUID.
            pub fn from_uuid(id: uuid::Uuid) -> Self {
                Self(id)
            }

            /// The UUID as stored in the database.
            pub fn as_uuid(&self) -> uuid::Uuid {
                self.0
            }

            /// Parses the public form; anything else is `None` (callers answer 404).
            pub fn parse(raw: &str) -> Option<Self> {
                let hex = raw.strip_prefix($prefix)?;
                if hex.len() != 32 {
                    return None;
                }
                uuid::Uuid::try_parse(hex).ok().map(Self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}{}", $prefix, self.0.simple())
            }
        }
    };
}

pub(crate) use prefixed_id;
