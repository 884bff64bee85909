//! One operation into one manifest: parameters and body as input
//! properties, the URL template, query and header templates, and an input
//! schema the server accepts.

use std::collections::HashMap;

use serde_json::{json, Map, Value};
use toolserver_domain::{InputSchema, ToolLimits};

use crate::body::{self, Body, Selection};
use crate::description::describe;
use crate::ids::Ids;
use crate::names::PropertyNames;
use crate::parameters::{self, Location, Parameter};
use crate::patterns::Patterns;
use crate::schema::Converter;
use crate::security::{self, Auth};
use crate::servers;
use crate::ImportOptions;

/// An operation and where it sits in the document.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operation<'a> {
    /// Its path template, e.g. `/pet/{petId}`.
    pub path: &'a str,
    /// Its method, lower case.
    pub method: &'a str,
    /// Its path item (references inlined).
    pub item: &'a Value,
    /// The operation object.
    pub operation: &'a Value,
}

/// A converted operation, waiting for its name.
#[derive(Debug)]
pub(crate) struct Built {
    manifest: Map<String, Value>,
    notes: Vec<String>,
}

impl Built {
    /// The manifest under `name`, and what the conversion left out.
    pub(crate) fn named(self, name: String) -> (Value, Vec<String>) {
        let mut manifest = Map::new();
        manifest.insert("name".into(), Value::String(name));
        manifest.extend(self.manifest);
        (Value::Object(manifest), self.notes)
    }
}

/// What every operation of one import shares.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    document: &'a Value,
    legacy: bool,
    options: &'a ImportOptions,
    ids: Ids,
    patterns: Patterns,
}

impl<'a> Context<'a> {
    /// A context for `document`, whose identifiers are `ids`; `legacy` for
    /// OpenAPI 3.0.
    pub(crate) fn new(
        document: &'a Value,
        legacy: bool,
        options: &'a ImportOptions,
        ids: Ids,
    ) -> Self {
        Self {
            document,
            legacy,
            options,
            ids,
            patterns: Patterns::default(),
        }
    }

    /// The manifest (without name) of `op`, or why it cannot be a tool.
    pub(crate) fn build(&mut self, op: &Operation<'_>) -> Result<Built, String> {
        let document = self.document;
        let base = servers::base_url(document, op.item, op.operation, self.options)?;
        let auth = security::auth(document, op.operation, self.options);
        let mut params = parameters::collect(document, op.item, op.operation, op.path)?;
        params.retain(|p| !supplied_by_auth(p, &auth));
        let body = body::select(document, op.operation)?;

        let converter = Converter::new(document, self.legacy, &self.ids, &mut self.patterns);
        let mut request = Request::new(converter);
        let path = request.add_parameters(op.path, &params)?;
        let mut http = Map::new();
        http.insert("method".into(), op.method.to_ascii_uppercase().into());
        http.insert("url".into(), servers::join(&base, &path).into());
        let mut notes: Vec<String> = auth.note.into_iter().collect();
        match body {
            Selection::None => {}
            Selection::Dropped(note) => notes.push(note),
            Selection::Body(body) => {
                let placeholder = request.add_body(&body)?;
                http.insert("body".into(), placeholder.into());
                http.insert("bodyType".into(), body.body_type.as_str().into());
            }
        }
        request
            .query
            .extend(auth.query.into_iter().map(|(k, v)| (k, v.into())));
        request
            .headers
            .extend(auth.headers.into_iter().map(|(k, v)| (k, v.into())));
        http.insert(
            "query".into(),
            Value::Object(std::mem::take(&mut request.query)),
        );
        http.insert(
            "headers".into(),
            Value::Object(std::mem::take(&mut request.headers)),
        );
        let input = request.input_schema()?;

        let mut manifest = Map::new();
        manifest.insert(
            "description".into(),
            describe(op.method, op.path, op.operation).into(),
        );
        manifest.insert("inputSchema".into(), input);
        manifest.insert("effects".into(), effects(op.method).into());
        manifest.insert("kind".into(), "http".into());
        manifest.insert("http".into(), Value::Object(http));
        Ok(Built { manifest, notes })
    }
}

/// The tool's input properties and the request templates that use them.
struct Request<'c> {
    converter: Converter<'c>,
    names: PropertyNames,
    properties: Map<String, Value>,
    required: Vec<Value>,
    query: Map<String, Value>,
    headers: Map<String, Value>,
}

impl<'c> Request<'c> {
    fn new(converter: Converter<'c>) -> Self {
        Self {
            converter,
            names: PropertyNames::default(),
            properties: Map::new(),
            required: Vec::new(),
            query: Map::new(),
            headers: Map::new(),
        }
    }

    /// Adds a property per parameter (path ones first, so they keep their
    /// names when they can) and returns the path template using them.
    fn add_parameters(&mut self, path: &str, params: &[Parameter<'_>]) -> Result<String, String> {
        let mut path_properties = HashMap::new();
        for location in [Location::Path, Location::Query, Location::Header] {
            for param in params.iter().filter(|p| p.location == location) {
                let property = match location {
                    Location::Path => self.names.claim_varname(&param.name),
                    Location::Query | Location::Header => self.names.claim(&param.name),
                };
                let placeholder = Value::String(placeholder(&property));
                match location {
                    Location::Path => {
                        path_properties.insert(param.name.as_str(), property.clone());
                    }
                    Location::Query => {
                        self.query.insert(param.name.clone(), placeholder);
                    }
                    Location::Header => {
                        self.headers.insert(param.name.clone(), placeholder);
                    }
                }
                self.add_property(property, param.schema, param.description, param.required)
                    .map_err(|err| format!("parameter {:?}: {err}", param.name))?;
            }
        }
        Ok(parameters::rewrite_variables(path, |name| {
            path_properties
                .get(name)
                .cloned()
                .unwrap_or_else(|| name.to_owned())
        }))
    }

    /// Adds the body's property and returns the manifest's `body` template.
    fn add_body(&mut self, body: &Body<'_>) -> Result<String, String> {
        let property = self.names.claim("body");
        let placeholder = placeholder(&property);
        self.add_property(property, body.schema, body.description, body.required)
            .map_err(|err| format!("request body: {err}"))?;
        Ok(placeholder)
    }

    fn add_property(
        &mut self,
        property: String,
        schema: Option<&Value>,
        description: Option<&str>,
        required: bool,
    ) -> Result<(), String> {
        let schema = property_schema(&mut self.converter, schema, description)?;
        if required {
            self.required.push(Value::String(property.clone()));
        }
        self.properties.insert(property, schema);
        Ok(())
    }

    /// The input schema, checked as the server checks it.
    fn input_schema(self) -> Result<Value, String> {
        let mut input = Map::new();
        input.insert("type".into(), "object".into());
        input.insert("properties".into(), Value::Object(self.properties));
        if !self.required.is_empty() {
            input.insert("required".into(), Value::Array(self.required));
        }
        input.insert("additionalProperties".into(), Value::Bool(false));
        let defs = self.converter.finish()?;
        if !defs.is_empty() {
            input.insert("$defs".into(), Value::Object(defs));
        }
        let input = InputSchema::parse(Value::Object(input), &ToolLimits::DEFAULT)
            .map_err(|err| err.to_string())?;
        Ok(input.as_value().clone())
    }
}

/// The template of the top-level input property `property`.
fn placeholder(property: &str) -> String {
    format!("{{{{input.{property}}}}}")
}

/// Whether the credentials already fill this parameter's place.
fn supplied_by_auth(param: &Parameter<'_>, auth: &Auth) -> bool {
    match param.location {
        Location::Header => auth
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(&param.name)),
        Location::Query => auth.query.iter().any(|(name, _)| *name == param.name),
        Location::Path => false,
    }
}

/// A property's schema: the converted schema (any value when there is none)
/// with the parameter's or body's description.
fn property_schema(
    converter: &mut Converter<'_>,
    schema: Option<&Value>,
    description: Option<&str>,
) -> Result<Value, String> {
    let converted = match schema {
        Some(schema) => converter.convert(schema)?,
        None => json!({}),
    };
    let Some(description) = description else {
        return Ok(converted);
    };
    let mut object = match converted {
        Value::Object(object) => object,
        Value::Bool(false) => return Ok(Value::Bool(false)),
        _ => Map::new(),
    };
    object.insert("description".into(), description.into());
    Ok(Value::Object(object))
}

/// The manifest's `effects` for a method.
fn effects(method: &str) -> &'static str {
    match method {
        "put" | "delete" => "idempotent",
        "post" | "patch" => "side_effect",
        _ => "read",
    }
}
